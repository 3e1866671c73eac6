// Countersign's service worker: shows Web Push messages as notifications
// when no console tab is open, and opens the call on a click. A message
// names the tool, target and actor and links to the call; it never holds
// arguments, and nothing here can decide a call.
"use strict";

self.addEventListener("install", function () { self.skipWaiting(); });
self.addEventListener("activate", function (event) { event.waitUntil(self.clients.claim()); });

self.addEventListener("push", function (event) {
  var p = {};
  try { p = event.data ? event.data.json() : {}; } catch (e) { p = {}; }
  var opts = { body: p.body || "", tag: p.tag || p.id || "countersign", renotify: true, data: { url: p.url || "/" } };
  event.waitUntil(self.registration.showNotification(p.title || "Countersign", opts));
});

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  // Only the console's own pages are opened.
  var u = new URL((event.notification.data && event.notification.data.url) || "/", self.location.origin);
  if (u.origin !== self.location.origin) u = new URL(u.pathname, self.location.origin);
  event.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(function (tabs) {
    for (var i = 0; i < tabs.length; i++) {
      if (tabs[i].url === u.href && "focus" in tabs[i]) return tabs[i].focus();
    }
    return self.clients.openWindow(u.href);
  }));
});
