// Countersign console: connection indicator, countdowns, and the one-second
// arming delay on decide buttons. Loaded as a file (no inline script, per
// the Content-Security-Policy).
(function () {
  "use strict";

  // Decide buttons are rendered disabled and armed one second after they
  // appear or change, so a click aimed at something else cannot approve a
  // call that just arrived.
  var armed = typeof WeakSet === "function" ? new WeakSet() : null;
  function arm(root) {
    var buttons = (root || document).querySelectorAll("button[data-arm]");
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i];
      if (armed && armed.has(b)) continue;
      if (armed) armed.add(b);
      b.disabled = true;
      (function (btn) {
        setTimeout(function () { btn.disabled = false; }, parseInt(btn.getAttribute("data-arm"), 10) || 1000);
      })(b);
    }
  }

  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function span(ms) {
    var s = Math.floor(ms / 1000);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    if (s < 172800) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " days";
  }

  // Countdowns and ages are computed against the server's clock: the page
  // carries the time it was rendered.
  var skew = 0;
  function readSkew() {
    var m = document.querySelector('meta[name="countersign-now"]');
    if (m) {
      var t = Date.parse(m.getAttribute("content"));
      if (!isNaN(t)) skew = t - Date.now();
    }
  }
  function tick() {
    var now = Date.now() + skew;
    var els = document.querySelectorAll("time[data-countdown]");
    for (var i = 0; i < els.length; i++) {
      var t = Date.parse(els[i].getAttribute("datetime"));
      if (isNaN(t)) continue;
      var d = t - now;
      els[i].textContent = d <= 0 ? "deadline passed" : span(d) + " left";
      els[i].classList.toggle("urgent", d > 0 && d < 60000);
    }
    els = document.querySelectorAll("time[data-age]");
    for (var j = 0; j < els.length; j++) {
      var a = Date.parse(els[j].getAttribute("datetime"));
      if (!isNaN(a)) els[j].textContent = span(Math.max(0, now - a)) + " ago";
    }
  }

  // Times are rendered in UTC; each <time data-local> is shown in the
  // viewer's own time zone, with the UTC time kept on hover. "stacked"
  // puts the date above the time, for narrow table columns.
  function two(n) { return n < 10 ? "0" + n : "" + n; }
  function zoneName(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
      for (var i = 0; i < parts.length; i++) if (parts[i].type === "timeZoneName") return parts[i].value;
    } catch (e) { /* an old browser: the offset below is used */ }
    var off = -d.getTimezoneOffset();
    return "UTC" + (off < 0 ? "-" : "+") + two(Math.floor(Math.abs(off) / 60)) + ":" + two(Math.abs(off) % 60);
  }
  function localize(root) {
    var els = (root || document).querySelectorAll("time[data-local]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (el.getAttribute("data-localized") === "1") continue;
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      var day = d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate());
      var time = two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + " " + zoneName(d);
      if (!el.title) el.title = el.textContent;
      el.textContent = "";
      el.appendChild(document.createTextNode(day));
      if (el.getAttribute("data-local") === "stacked") el.appendChild(document.createElement("br"));
      else el.appendChild(document.createTextNode(" "));
      el.appendChild(document.createTextNode(time));
      el.setAttribute("data-localized", "1");
    }
  }

  function countCards() {
    var list = document.getElementById("queue-list");
    var out = document.getElementById("pending-count");
    if (list && out) out.textContent = String(list.querySelectorAll("[data-call]").length);
  }

  function setConn(state, text) {
    var el = document.getElementById("conn");
    if (!el || el.getAttribute("data-state") === "ended") return;
    el.setAttribute("data-state", state);
    el.textContent = text;
  }

  document.addEventListener("DOMContentLoaded", function () {
    readSkew();
    localize(document);
    arm(document);
    tick();
    countCards();
    setInterval(tick, 1000);
    var body = document.body;
    body.addEventListener("htmx:wsConnecting", function () { setConn("connecting", "connecting…"); });
    body.addEventListener("htmx:wsOpen", function () { setConn("live", "live"); });
    body.addEventListener("htmx:wsClose", function (e) {
      var code = e.detail && e.detail.event ? e.detail.event.code : 0;
      if ([1006, 1011, 1012, 1013].indexOf(code) >= 0) setConn("reconnecting", "reconnecting…");
      else setConn("closed", "disconnected: reload the page");
    });
    body.addEventListener("htmx:wsError", function () { setConn("reconnecting", "reconnecting…"); });
    body.addEventListener("htmx:wsAfterMessage", function () { arm(document); localize(document); tick(); countCards(); });
  });
})();
