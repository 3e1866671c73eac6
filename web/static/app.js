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
        setTimeout(function () {
          btn.disabled = false;
          settleApprove();
        }, parseInt(btn.getAttribute("data-arm"), 10) || 1000);
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

  // The queue: the server renders the cards in the page's order with the
  // calls of one tool, target and actor together; cards pushed later are
  // put in place here, and each group of two or more gets a heading.
  function cardNum(el, name) { return parseInt(el.getAttribute(name), 10) || 0; }
  function compareCards(sort) {
    return function (a, b) {
      if (sort === "oldest") return cardNum(a, "data-created") - cardNum(b, "data-created");
      if (sort === "newest") return cardNum(b, "data-created") - cardNum(a, "data-created");
      if (sort === "risk") {
        var ra = cardNum(b, "data-risk") - cardNum(a, "data-risk");
        if (ra !== 0) return ra;
      }
      if (sort === "tool") {
        var ta = a.getAttribute("data-tool") || "", tb = b.getAttribute("data-tool") || "";
        if (ta !== tb) return ta < tb ? -1 : 1;
      }
      return (cardNum(a, "data-deadline") - cardNum(b, "data-deadline")) ||
        (cardNum(a, "data-created") - cardNum(b, "data-created"));
    };
  }
  function groupHeading(key, members) {
    var h = document.createElement("div");
    h.className = "group-head";
    h.setAttribute("data-group-head", key);
    h.setAttribute("data-testid", "group-head");
    var count = document.createElement("strong");
    count.setAttribute("data-testid", "group-count");
    count.textContent = members.length + " calls";
    h.appendChild(count);
    var parts = [[" of ", "card-tool"], [" on ", "card-target"], [" by ", "card-actor"]];
    for (var i = 0; i < parts.length; i++) {
      var src = members[0].querySelector('[data-testid="' + parts[i][1] + '"]');
      if (!src) continue;
      h.appendChild(document.createTextNode(parts[i][0]));
      var copy = document.createElement("span");
      copy.className = "mono";
      // A copy of what the server rendered: escapes stay escapes.
      for (var n = src.firstChild; n; n = n.nextSibling) copy.appendChild(n.cloneNode(true));
      h.appendChild(copy);
    }
    h.appendChild(document.createTextNode(" · each is decided on its own"));
    if (members[0].querySelector('input[data-testid="card-select"]')) {
      var pick = document.createElement("label");
      pick.className = "group-pick";
      var box = document.createElement("input");
      box.type = "checkbox";
      box.setAttribute("data-testid", "group-select");
      box.setAttribute("data-group-select", key);
      pick.appendChild(box);
      pick.appendChild(document.createTextNode(" select all in this group"));
      h.appendChild(document.createTextNode(" "));
      h.appendChild(pick);
    }
    return h;
  }
  function orderQueue() {
    var list = document.getElementById("queue-list");
    var conf = document.getElementById("queue-order");
    if (!list || !conf) return;
    var cards = Array.prototype.slice.call(list.querySelectorAll("article[data-call]"));
    cards.sort(compareCards(conf.getAttribute("data-sort") || "deadline"));
    var groups = {}, keys = [];
    for (var i = 0; i < cards.length; i++) {
      var g = cards[i].getAttribute("data-group") || cards[i].getAttribute("data-call");
      if (!groups[g]) { groups[g] = []; keys.push(g); }
      groups[g].push(cards[i]);
    }
    var want = [];
    for (var k = 0; k < keys.length; k++) {
      var members = groups[keys[k]];
      if (members.length > 1) {
        var old = list.querySelector('[data-group-head="' + keys[k] + '"]');
        var fresh = groupHeading(keys[k], members);
        if (old && old.textContent === fresh.textContent) fresh = old;
        want.push(fresh);
      }
      for (var m = 0; m < members.length; m++) {
        members[m].classList.toggle("grouped", members.length > 1);
        want.push(members[m]);
      }
    }
    // Move nothing that is already in place, so focus and selection stay.
    var same = list.children.length === want.length;
    for (var w = 0; same && w < want.length; w++) same = list.children[w] === want[w];
    if (!same) {
      var heads = list.querySelectorAll("[data-group-head]");
      for (var x = 0; x < heads.length; x++) if (want.indexOf(heads[x]) < 0) heads[x].remove();
      for (var y = 0; y < want.length; y++) list.appendChild(want[y]);
    }
    // Card links carry the queue's filter and sort, so that the call page
    // offers the next pending call in the same order.
    var query = conf.getAttribute("data-query") || "";
    var links = list.querySelectorAll('a[href^="/calls/"]');
    for (var l = 0; l < links.length; l++) {
      var base = links[l].getAttribute("href").split("?")[0];
      links[l].setAttribute("href", query ? base + "?" + query : base);
    }
  }

  // Batch review: each card's box belongs to the batch form
  // (form="batch-form"), whose button says how many are ticked; a group's
  // heading ticks or clears its whole group; x ticks the focused card.
  // Nothing here decides: the form opens the review page.
  function batchBoxes(group) {
    var sel = '#queue-list article[data-call]' + (group !== undefined ? '[data-group="' + group + '"]' : "") +
      ' input[data-testid="card-select"]';
    return Array.prototype.slice.call(document.querySelectorAll(sel));
  }
  function updateBatch() {
    var form = document.getElementById("batch-form");
    if (!form) return;
    var boxes = batchBoxes(), n = 0;
    for (var i = 0; i < boxes.length; i++) if (boxes[i].checked) n++;
    var max = parseInt(form.getAttribute("data-max"), 10) || 50;
    var count = form.querySelector('[data-testid="batch-count"]');
    if (count) count.textContent = n > max ? n + " selected (at most " + max + ")" : n + " selected";
    var btn = form.querySelector('[data-testid="batch-review"]');
    if (btn) btn.disabled = n === 0 || n > max;
    var heads = document.querySelectorAll("#queue-list [data-group-select]");
    for (var h = 0; h < heads.length; h++) {
      var members = batchBoxes(heads[h].getAttribute("data-group-select")), on = 0;
      for (var m = 0; m < members.length; m++) if (members[m].checked) on++;
      heads[h].checked = members.length > 0 && on === members.length;
      heads[h].indeterminate = on > 0 && on < members.length;
    }
  }
  function onBatchChange(e) {
    var t = e.target;
    if (!t || !t.getAttribute) return;
    var group = t.getAttribute("data-group-select");
    if (group !== null) {
      var members = batchBoxes(group);
      for (var i = 0; i < members.length; i++) members[i].checked = t.checked;
    } else if (t.getAttribute("data-testid") !== "card-select") {
      return;
    }
    updateBatch();
  }
  function toggleRow() {
    var cur = document.querySelector("#queue-list article.selected") ||
      (document.activeElement && document.activeElement.closest && document.activeElement.closest("article[data-call]"));
    var box = cur && cur.querySelector('input[data-testid="card-select"]');
    if (!box) return;
    box.checked = !box.checked;
    updateBatch();
  }

  // Keys: j/k move between cards, o opens one, a goes to Approve (it still
  // arms after its delay and still needs a press), d to the deny reason, ?
  // shows the keys. No key decides anything.
  var selected = -1;
  function cardsInOrder() { return Array.prototype.slice.call(document.querySelectorAll("#queue-list article[data-call]")); }
  function select(step) {
    var cards = cardsInOrder();
    if (!cards.length) return;
    var cur = document.querySelector("#queue-list article.selected");
    var i = cur ? cards.indexOf(cur) : -1;
    i = i < 0 ? (step > 0 ? 0 : cards.length - 1) : Math.max(0, Math.min(cards.length - 1, i + step));
    for (var c = 0; c < cards.length; c++) cards[c].classList.toggle("selected", c === i);
    cards[i].setAttribute("aria-current", "true");
    var link = cards[i].querySelector('a[href^="/calls/"]');
    if (link) link.focus();
    cards[i].scrollIntoView({ block: "nearest" });
    selected = i;
  }
  function openSelected() {
    var cur = document.querySelector("#queue-list article.selected") ||
      (document.activeElement && document.activeElement.closest && document.activeElement.closest("article[data-call]"));
    var link = cur && cur.querySelector('a[href^="/calls/"]');
    if (link) link.click();
  }
  // a asks for the Approve button; it gets the focus once armed, even if
  // the socket replaced it in the meantime.
  var wantApprove = false;
  function settleApprove() {
    if (!wantApprove) return;
    var b = document.querySelector('[data-testid="approve"]');
    if (b && !b.disabled) { wantApprove = false; b.focus(); }
  }
  function goApprove() {
    var confirm = document.querySelector('[data-testid="confirm-input"]');
    if (confirm && confirm.value === "") { confirm.focus(); return; }
    var b = document.querySelector('[data-testid="approve"]');
    if (!b) return;
    b.scrollIntoView({ block: "nearest" });
    wantApprove = true;
    settleApprove();
  }
  function goDeny() {
    var r = document.querySelector('[data-testid="deny-reason"]');
    if (r) { r.scrollIntoView({ block: "nearest" }); r.focus(); }
  }
  function toggleKeys(show) {
    var help = document.getElementById("keys-help");
    if (help) help.hidden = show === undefined ? !help.hidden : !show;
  }
  function onKey(e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target;
    if (t && (t.isContentEditable || (/^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName) && t.type !== "checkbox"))) {
      if (e.key === "Escape") t.blur();
      return;
    }
    switch (e.key) {
      case "j": select(1); break;
      case "k": select(-1); break;
      case "o": openSelected(); break;
      case "x": toggleRow(); break;
      case "a": goApprove(); break;
      case "d": goDeny(); break;
      case "?": toggleKeys(); break;
      case "Escape": toggleKeys(false); break;
      default: return;
    }
    e.preventDefault();
  }

  // Decision forms carry the queue's filter and sort from the page's
  // address, so that the page after the decision offers the next call in
  // the same order. The pushed fragments carry none of it.
  function fillQuery(e) {
    var form = e.target;
    if (!form || !form.querySelectorAll) return;
    var fields = form.querySelectorAll('input[data-fill="queue-query"]');
    if (!fields.length) return;
    var params = new URLSearchParams(window.location.search);
    params.delete("notice");
    for (var i = 0; i < fields.length; i++) fields[i].value = params.toString();
  }

  // "Someone else is viewing this call": the socket names everyone with
  // the page open; the page leaves out its own viewer.
  function presence() {
    var box = document.getElementById("presence");
    if (!box) return;
    var me = box.getAttribute("data-me");
    var items = box.querySelectorAll("li[data-viewer]");
    var others = 0;
    for (var i = 0; i < items.length; i++) {
      if (items[i].getAttribute("data-viewer") === me) items[i].remove();
      else others++;
    }
    box.hidden = others === 0;
  }

  // Long values are in the page whole and shown collapsed, with their
  // length and a button that shows them all.
  function collapseLong(root) {
    var els = (root || document).querySelectorAll('[data-testid="arg-long"]');
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (el.getAttribute("data-ready") === "1") continue;
      el.setAttribute("data-ready", "1");
      el.classList.add("collapsed");
      var btn = el.querySelector('[data-testid="show-all"]');
      if (!btn) continue;
      btn.hidden = false;
      btn.setAttribute("aria-expanded", "false");
      var label = btn.textContent;
      (function (box, b, shown) {
        b.addEventListener("click", function () {
          var collapsed = box.classList.toggle("collapsed");
          b.textContent = collapsed ? shown : "show less";
          b.setAttribute("aria-expanded", collapsed ? "false" : "true");
        });
      })(el, btn, label);
    }
  }

  // "Copy canonical call" copies the text of the element it names.
  function onCopy(e) {
    var b = e.target && e.target.closest ? e.target.closest("button[data-copy]") : null;
    if (!b) return;
    var src = document.querySelector('[data-testid="' + b.getAttribute("data-copy") + '"]');
    var status = b.parentNode.querySelector('[data-testid="copy-status"]');
    if (!src) return;
    var text = src.value !== undefined ? src.value : src.textContent;
    function done(ok) { if (status) status.textContent = ok ? "copied" : "select the text above and copy it"; }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
    } else {
      done(false);
    }
  }

  // A table wider than a phone scrolls inside itself, and so may the
  // decision beside a long call; they can then be reached and scrolled
  // with the keyboard.
  function scrollableTables() {
    var boxes = document.querySelectorAll("main table, .call-side");
    for (var i = 0; i < boxes.length; i++) {
      var t = boxes[i];
      if (t.scrollWidth > t.clientWidth + 1 || t.scrollHeight > t.clientHeight + 1) {
        t.setAttribute("tabindex", "0");
        if (t.tagName === "TABLE" && !t.hasAttribute("aria-label")) t.setAttribute("aria-label", "table, scrolls sideways");
      } else if (t.getAttribute("tabindex") === "0") {
        t.removeAttribute("tabindex");
      }
    }
  }

  // The calls allowances approved stay newest first and at most data-max
  // of them; every card of one allowance says what the most recently
  // rendered of them says it has left.
  function orderCovered() {
    var list = document.getElementById("covered-list");
    if (!list) return;
    var cards = Array.prototype.slice.call(list.querySelectorAll("article[data-covered]"));
    cards.sort(function (a, b) { return Number(b.getAttribute("data-at")) - Number(a.getAttribute("data-at")); });
    var max = Number(list.getAttribute("data-max")) || cards.length;
    for (var i = 0; i < cards.length; i++) {
      if (i < max) list.appendChild(cards[i]);
      else list.removeChild(cards[i]);
    }
    var newest = {}, lefts = list.querySelectorAll("[data-allowance-left]"), j, id;
    for (j = 0; j < lefts.length; j++) {
      id = lefts[j].getAttribute("data-allowance-left");
      if (!newest[id] || Number(lefts[j].getAttribute("data-left-at")) > Number(newest[id].getAttribute("data-left-at"))) newest[id] = lefts[j];
    }
    for (j = 0; j < lefts.length; j++) {
      id = lefts[j].getAttribute("data-allowance-left");
      if (newest[id] !== lefts[j]) lefts[j].textContent = newest[id].textContent;
    }
  }

  // A list page that does not take a new call (another page of the list
  // holds it) counts it once and says so.
  function countNewRows() {
    var ids = document.getElementById("new-rows-ids");
    var box = document.getElementById("new-rows");
    if (!ids || !box) return;
    var seen = {}, n = 0, items = ids.querySelectorAll("data[value]");
    for (var i = 0; i < items.length; i++) {
      var v = items[i].getAttribute("value");
      if (!seen[v]) { seen[v] = true; n++; }
    }
    var count = box.querySelector('[data-testid="new-rows-count"]');
    if (count) count.textContent = n === 1 ? "1 new call" : n + " new calls";
    box.hidden = n === 0;
  }

  function countCards() {
    var list = document.getElementById("queue-list");
    var out = document.getElementById("pending-count");
    if (list && out) out.textContent = String(list.querySelectorAll("[data-call]").length);
    list = document.getElementById("unresolved-list");
    out = document.getElementById("unresolved-count");
    if (list && out) out.textContent = String(list.querySelectorAll("[data-unresolved]").length);
  }

  // A live swap replaces a part of the page with the server's newer
  // rendering of it. What the person typed, ticked or chose there, and
  // where their cursor was, is carried into the new rendering, so an update
  // (another operator's approval, a resync) never takes away what someone
  // was writing. A field is known by its form's action, its name (and value,
  // for a box), and the nearest element with an id, so that the same field
  // of another card is never confused with it.
  var carriedFocus = null;
  function isField(el) {
    return el && /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName) &&
      ["hidden", "submit", "button", "reset", "image", "file"].indexOf(el.type) < 0;
  }
  function fieldKey(el, root) {
    var owner = el.parentNode && el.parentNode.closest ? el.parentNode.closest("[id]") : null;
    // A field outside its form (form="ID") has no form while it is in a
    // fragment not yet on the page; its key names the form all the same.
    var form = el.form || (el.getAttribute("form") && document.getElementById(el.getAttribute("form"))) || el.closest("form");
    var box = el.type === "checkbox" || el.type === "radio";
    return [owner ? owner.id : (root && root.id) || "", form ? form.getAttribute("action") || "" : "",
      el.tagName, el.name || "#" + el.id, box ? el.value : ""].join("|");
  }
  function edited(el) {
    if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
    if (el.tagName === "SELECT") {
      for (var i = 0; i < el.options.length; i++) {
        if (el.options[i].selected !== el.options[i].defaultSelected) return true;
      }
      return false;
    }
    return el.value !== el.defaultValue;
  }
  function carryFields(oldRoot, newRoot) {
    if (!oldRoot || !newRoot || !oldRoot.querySelectorAll || !newRoot.querySelectorAll) return;
    var mine = {}, fields = oldRoot.querySelectorAll("input, textarea, select"), i;
    for (i = 0; i < fields.length; i++) {
      if (isField(fields[i]) && edited(fields[i])) mine[fieldKey(fields[i], oldRoot)] = fields[i];
    }
    var active = document.activeElement;
    if (isField(active) && oldRoot.contains(active)) {
      carriedFocus = { key: fieldKey(active, oldRoot), start: null, end: null };
      try { carriedFocus.start = active.selectionStart; carriedFocus.end = active.selectionEnd; } catch (e) { /* no selection on this type */ }
    }
    // A section the person opened (details with an id) stays open.
    var opened = oldRoot.querySelectorAll("details[open][id]");
    for (i = 0; i < opened.length; i++) {
      var again = newRoot.querySelector("details#" + CSS.escape(opened[i].id));
      if (again) again.open = true;
    }
    var next = newRoot.querySelectorAll("input, textarea, select");
    for (i = 0; i < next.length; i++) {
      var el = next[i];
      if (!isField(el)) continue;
      var was = mine[fieldKey(el, newRoot)];
      if (!was) continue;
      if (el.type === "checkbox" || el.type === "radio") el.checked = was.checked;
      else if (el.tagName === "SELECT") {
        for (var j = 0; j < el.options.length && j < was.options.length; j++) el.options[j].selected = was.options[j].selected;
      } else el.value = was.value;
    }
  }
  function restoreFocus() {
    var c = carriedFocus;
    carriedFocus = null;
    if (!c || isField(document.activeElement)) return;
    var fields = document.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      if (!isField(fields[i]) || fieldKey(fields[i], null) !== c.key) continue;
      fields[i].focus({ preventScroll: true });
      if (c.start !== null) {
        try { fields[i].setSelectionRange(c.start, c.end); } catch (e) { /* no selection on this type */ }
      }
      return;
    }
  }

  function setConn(state, text) {
    var el = document.getElementById("conn");
    if (!el || el.getAttribute("data-state") === "ended") return;
    el.setAttribute("data-state", state);
    el.textContent = text;
  }

  // A page that follows something that can still change (a call's status
  // page, <meta name="countersign-follow">) reads itself again every so
  // many seconds and puts the new status ([data-follow]) in place of the
  // old when where the call stands changed, without reloading: the
  // reader's place and focus stay, and a polite live region says what
  // changed. It stops once the answer no longer asks to be followed.
  function followPage() {
    var meta = document.querySelector('meta[name="countersign-follow"]');
    var every = meta ? Number(meta.getAttribute("content")) * 1000 : 0;
    if (!(every > 0) || !window.fetch || !window.DOMParser) return;
    function again() { setTimeout(read, every); }
    function read() {
      fetch(location.href, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      }).then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("[data-follow]"), cur = document.querySelector("[data-follow]");
        if (fresh && cur && fresh.getAttribute("data-follow") !== cur.getAttribute("data-follow")) {
          var node = document.importNode(fresh, true);
          cur.parentNode.replaceChild(node, cur);
          localize(node);
          tick();
          var news = document.querySelector('[data-testid="follow-news"]');
          var status = node.querySelector('[data-testid="status-value"]');
          if (news && status) news.textContent = "The call is now " + status.textContent.trim() + ".";
        }
        if (doc.querySelector('meta[name="countersign-follow"]')) again();
      }).catch(again);
    }
    again();
  }

  document.addEventListener("DOMContentLoaded", function () {
    readSkew();
    localize(document);
    arm(document);
    tick();
    orderQueue();
    orderCovered();
    countCards();
    updateBatch();
    document.addEventListener("keydown", onKey);
    document.addEventListener("change", onBatchChange);
    document.addEventListener("submit", fillQuery, true);
    document.addEventListener("click", onCopy);
    collapseLong(document);
    followPage();
    presence();
    scrollableTables();
    window.addEventListener("resize", scrollableTables);
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
    // An upsert inserts a card into its list (hx-swap-oob="afterbegin:#…");
    // any copy already on the page goes first. Doing this here, rather
    // than with a delete swap of the card's id, keeps a brand-new card from
    // asking htmx to delete what the page does not have
    // (htmx:oobErrorNoTarget).
    body.addEventListener("htmx:oobBeforeSwap", function (e) {
      var d = e.detail || {};
      var frag = d.fragment, target = d.target;
      if (!frag || !target || !target.id || ["queue-list", "blocks-list", "unresolved-list", "covered-list"].indexOf(target.id) < 0) return;
      var kids = frag.children || [];
      for (var i = 0; i < kids.length; i++) {
        // The list itself, replaced whole by a resync, is not a copy; what
        // was typed in it is carried over.
        if (kids[i].id === target.id) carryFields(target, kids[i]);
        if (!kids[i].id || kids[i].id === target.id) continue;
        // A call an allowance approved at its submission may have been
        // pushed as pending a moment before: its pending card goes.
        var pending = kids[i].getAttribute("data-covered") && document.getElementById("call-" + kids[i].getAttribute("data-covered"));
        if (pending && pending.parentNode) pending.parentNode.removeChild(pending);
        var old = document.getElementById(kids[i].id);
        if (old && old !== kids[i] && old.parentNode) {
          carryFields(old, kids[i]);
          old.parentNode.removeChild(old);
        }
      }
    });
    body.addEventListener("htmx:oobBeforeSwap", function (e) {
      var d = e.detail || {};
      if (!d.target || !d.fragment) return;
      // An insert into a list carries the fields of the card it replaces
      // (above); a part replaced whole carries its own.
      if (["queue-list", "blocks-list", "unresolved-list", "covered-list"].indexOf(d.target.id) >= 0) return;
      carryFields(d.target, d.fragment);
    });
    body.addEventListener("htmx:oobAfterSwap", restoreFocus);
    body.addEventListener("htmx:wsAfterMessage", function () { restoreFocus(); arm(document); localize(document); tick(); orderQueue(); orderCovered(); presence(); scrollableTables(); countCards(); countNewRows(); updateBatch(); });
  });
})();
