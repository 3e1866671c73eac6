// Countersign console: reaching the operator who is not looking.
// - The tab title counts the pending calls: "(3) Queue · Countersign".
// - Desktop notifications, asked for only when the operator clicks the
//   button (never at load), when a call arrives while the tab is hidden and
//   when a pending call nears its deadline; an optional sound.
// - Web Push: the same click subscribes this browser through a service
//   worker (/sw.js), so the operator is reached with the tab closed.
// Loaded as a file: the Content-Security-Policy forbids inline script.
(function () {
  "use strict";

  var KEY_ON = "countersign.notify";
  var KEY_SOUND = "countersign.sound";
  var NEAR_MS = 60000; // "deadline near" one minute before decide_by

  function load(k) { try { return window.localStorage.getItem(k); } catch (e) { return null; } }
  function store(k, v) { try { window.localStorage.setItem(k, v); } catch (e) { /* private mode */ } }

  var skew = 0;
  function readSkew() {
    var m = document.querySelector('meta[name="countersign-now"]');
    var t = m ? Date.parse(m.getAttribute("content")) : NaN;
    if (!isNaN(t)) skew = t - Date.now();
  }

  function list() { return document.getElementById("queue-list"); }
  function cards() { var l = list(); return l ? l.querySelectorAll("[data-call]") : []; }

  // The title: "(N) " before the page's own title while N calls wait.
  function updateTitle() {
    if (!list()) return;
    var base = document.title.replace(/^\(\d+\) /, "");
    var n = cards().length;
    document.title = n > 0 ? "(" + n + ") " + base : base;
  }

  function supported() { return "Notification" in window; }
  function enabled() { return supported() && Notification.permission === "granted" && load(KEY_ON) === "on"; }

  var audio = null;
  function beep() {
    if (load(KEY_SOUND) !== "on" || !audio) return;
    try {
      var o = audio.createOscillator(), g = audio.createGain();
      o.frequency.value = 880;
      g.gain.value = 0.08;
      o.connect(g);
      g.connect(audio.destination);
      o.start();
      o.stop(audio.currentTime + 0.18);
    } catch (e) { /* no audio device */ }
  }

  function text(card, testid) {
    var el = card.querySelector('[data-testid="' + testid + '"]');
    return el ? el.textContent.replace(/\s+/g, " ").trim() : "";
  }

  // show raises a notification for a card while the tab is hidden. The tag
  // is the call id, as in push messages, so one call shows once.
  function show(card, near) {
    if (!enabled() || !document.hidden) return;
    var id = card.getAttribute("data-call");
    var title = (near ? "Deadline near: " : "Approval needed: ") + text(card, "card-tool");
    var opts = { body: text(card, "card-target") + " · by " + text(card, "card-actor"), tag: id, renotify: true, data: { url: "/calls/" + encodeURIComponent(id) } };
    try {
      var n = new Notification(title, opts);
      n.onclick = function () { window.focus(); window.location.href = opts.data.url; n.close(); };
    } catch (e) {
      // Some platforms (Android) show notifications only from a worker.
      if (navigator.serviceWorker) navigator.serviceWorker.ready.then(function (reg) { reg.showNotification(title, opts); });
    }
    beep();
  }

  var known = null; // call ids on the page; null until the first scan
  var nearTimers = {};

  function scheduleNear(card, id) {
    var t = card.querySelector("time[data-countdown]");
    var at = t ? Date.parse(t.getAttribute("datetime")) : NaN;
    if (isNaN(at)) return;
    var wait = at - NEAR_MS - (Date.now() + skew);
    if (wait <= 0) return; // already near: it was announced on arrival
    nearTimers[id] = setTimeout(function () {
      delete nearTimers[id];
      var c = document.querySelector('#queue-list [data-call="' + id + '"]');
      if (c) show(c, true);
    }, Math.min(wait, 2147483647));
  }

  function scan() {
    var cs = cards(), seen = {};
    for (var i = 0; i < cs.length; i++) {
      var id = cs[i].getAttribute("data-call");
      seen[id] = true;
      if (known && known[id]) continue;
      if (known) show(cs[i], false);
      scheduleNear(cs[i], id);
    }
    for (var k in nearTimers) {
      if (!seen[k]) { clearTimeout(nearTimers[k]); delete nearTimers[k]; }
    }
    known = seen;
    updateTitle();
  }

  function csrf() {
    var i = document.querySelector('form[data-testid="logout-form"] input[name="csrf"]');
    return i ? i.value : "";
  }

  function post(path, fields) {
    var body = new URLSearchParams(fields);
    body.set("csrf", csrf());
    return fetch(path, { method: "POST", body: body, credentials: "same-origin", headers: { Accept: "application/json" } });
  }

  function keyBytes(b64) {
    var s = (b64 + "===".slice((b64.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    var raw = window.atob(s), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  // subscribePush registers the service worker and hands the browser's
  // subscription to the console, when the console has Web Push.
  function subscribePush() {
    if (!("serviceWorker" in navigator) || !("PushManager" in window)) return Promise.resolve(false);
    return fetch("/push/key", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (k) {
        if (!k || !k.key) return false;
        return navigator.serviceWorker.register("/sw.js")
          .then(function () { return navigator.serviceWorker.ready; })
          .then(function (reg) {
            return reg.pushManager.getSubscription().then(function (s) {
              return s || reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(k.key) });
            });
          })
          .then(function (sub) {
            var j = sub.toJSON();
            return post("/push/subscribe", { endpoint: j.endpoint, p256dh: j.keys.p256dh, auth: j.keys.auth });
          })
          .then(function (r) {
            // A refusal (too many browsers, an endpoint of another account)
            // says what to do next; the status line shows it.
            if (r.ok) return true;
            return r.json().then(function (e) { return (e && e.error && e.error.message) || false; }, function () { return false; });
          });
      })
      .catch(function () { return false; });
  }

  function unsubscribePush() {
    if (!("serviceWorker" in navigator)) return;
    navigator.serviceWorker.getRegistration("/").then(function (reg) {
      if (!reg) return;
      return reg.pushManager.getSubscription().then(function (s) {
        if (!s) return;
        return post("/push/unsubscribe", { endpoint: s.endpoint }).then(function () { return s.unsubscribe(); });
      });
    }).catch(function () { /* nothing to undo */ });
  }

  var button, status;
  function render() {
    if (!button) return;
    var p = Notification.permission;
    button.disabled = p === "denied";
    if (p === "denied") {
      button.textContent = "Notifications blocked";
      button.title = "This browser blocks notifications for the console; allow them in the site settings.";
    } else if (enabled()) {
      button.textContent = "Notifications on";
      button.title = "Click to stop desktop and push notifications in this browser.";
    } else {
      button.textContent = "Enable notifications";
      button.title = "Get a desktop notification when a call arrives while this tab is hidden, and before a deadline.";
    }
    button.setAttribute("data-state", p === "denied" ? "blocked" : enabled() ? "on" : "off");
  }

  function onClick() {
    if (enabled()) {
      store(KEY_ON, "off");
      unsubscribePush();
      render();
      return;
    }
    // The permission prompt comes from this click, never at load.
    var ask = Notification.requestPermission();
    var done = function (p) {
      if (p === "granted") {
        store(KEY_ON, "on");
        subscribePush().then(function (ok) { if (status) status.textContent = ok === true ? "push on" : (typeof ok === "string" ? ok : ""); });
      }
      render();
    };
    if (ask && ask.then) ask.then(done); else done(Notification.permission);
  }

  function controls() {
    if (!supported() || !list()) return;
    var header = document.querySelector("header.top");
    var who = header && header.querySelector(".who");
    if (!who) return;
    var box = document.createElement("span");
    box.className = "notify-controls";
    box.setAttribute("data-testid", "notify-controls");
    button = document.createElement("button");
    button.type = "button";
    button.setAttribute("data-testid", "notify-enable");
    button.addEventListener("click", onClick);
    var label = document.createElement("label");
    var sound = document.createElement("input");
    sound.type = "checkbox";
    sound.checked = load(KEY_SOUND) === "on";
    sound.setAttribute("data-testid", "notify-sound");
    sound.addEventListener("change", function () {
      store(KEY_SOUND, sound.checked ? "on" : "off");
      // Browsers let a page play sound only after a click on it.
      if (sound.checked && !audio && (window.AudioContext || window.webkitAudioContext)) {
        audio = new (window.AudioContext || window.webkitAudioContext)();
      }
      if (sound.checked) beep();
    });
    label.appendChild(sound);
    label.appendChild(document.createTextNode(" sound"));
    status = document.createElement("span");
    status.className = "muted";
    status.setAttribute("data-testid", "notify-status");
    box.appendChild(button);
    box.appendChild(label);
    box.appendChild(status);
    header.insertBefore(box, who);
    render();
  }

  document.addEventListener("DOMContentLoaded", function () {
    readSkew();
    controls();
    scan();
    document.body.addEventListener("htmx:wsAfterMessage", scan);
  });
})();
