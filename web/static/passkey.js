// Countersign console: passkey ceremonies (registration on the account
// page, approval on a call's page). Loaded as a file (no inline script, per
// the Content-Security-Policy). The server sends WebAuthn options as JSON
// with binary members in base64url and checks everything the browser
// answers; this script only carries them between the two.
(function () {
  "use strict";

  function b64urlToBytes(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }
  function bytesToB64url(buf) {
    var b = new Uint8Array(buf), s = "";
    for (var i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // Options from JSON, with the browser's own parser when it has one.
  function creationOptions(o) {
    if (PublicKeyCredential.parseCreationOptionsFromJSON) return PublicKeyCredential.parseCreationOptionsFromJSON(o);
    o.challenge = b64urlToBytes(o.challenge);
    o.user.id = b64urlToBytes(o.user.id);
    (o.excludeCredentials || []).forEach(function (c) { c.id = b64urlToBytes(c.id); });
    return o;
  }
  function requestOptions(o) {
    if (PublicKeyCredential.parseRequestOptionsFromJSON) return PublicKeyCredential.parseRequestOptionsFromJSON(o);
    o.challenge = b64urlToBytes(o.challenge);
    (o.allowCredentials || []).forEach(function (c) { c.id = b64urlToBytes(c.id); });
    return o;
  }
  // The credential as JSON, with the browser's own encoder when it has one.
  function credentialJSON(c) {
    if (c.toJSON) return JSON.stringify(c.toJSON());
    var r = c.response, out = {
      id: c.id, rawId: bytesToB64url(c.rawId), type: c.type,
      clientExtensionResults: c.getClientExtensionResults ? c.getClientExtensionResults() : {},
      response: { clientDataJSON: bytesToB64url(r.clientDataJSON) }
    };
    if (r.attestationObject) {
      out.response.attestationObject = bytesToB64url(r.attestationObject);
      if (r.getTransports) out.response.transports = r.getTransports();
    } else {
      out.response.authenticatorData = bytesToB64url(r.authenticatorData);
      out.response.signature = bytesToB64url(r.signature);
      if (r.userHandle) out.response.userHandle = bytesToB64url(r.userHandle);
    }
    return JSON.stringify(out);
  }

  function post(path, fields) {
    var body = new URLSearchParams();
    Object.keys(fields).forEach(function (k) { body.append(k, fields[k]); });
    return fetch(path, { method: "POST", body: body, credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (resp) {
        return resp.json().catch(function () { return {}; }).then(function (data) {
          if (!resp.ok) {
            var msg = data && data.error && data.error.message ? data.error.message : "the server answered " + resp.status;
            throw new Error(msg);
          }
          return data;
        });
      });
  }

  function say(el, text, isError) {
    if (!el) return;
    el.textContent = text;
    el.classList.toggle("error", !!isError);
  }

  function explain(err) {
    if (err && err.name === "NotAllowedError") return "The passkey prompt was cancelled or timed out. Nothing changed.";
    if (err && err.name === "InvalidStateError") return "This authenticator is already registered.";
    return (err && err.message) ? err.message : String(err);
  }

  function supported(status) {
    if (window.PublicKeyCredential && navigator.credentials) return true;
    say(status, "This browser does not support passkeys.", true);
    return false;
  }

  function register(form) {
    var status = document.getElementById("passkey-register-status");
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      if (!supported(status)) return;
      var csrf = form.getAttribute("data-csrf"), name = form.elements.name.value;
      var button = form.querySelector("button");
      button.disabled = true;
      say(status, "Follow your browser's prompt…", false);
      post("/account/passkeys/begin", { csrf: csrf })
        .then(function (begun) {
          return navigator.credentials.create({ publicKey: creationOptions(begun.options.publicKey) })
            .then(function (cred) {
              return post("/account/passkeys/finish", { csrf: csrf, ceremony: begun.ceremony, name: name, response: credentialJSON(cred) });
            });
        })
        .then(function (done) { window.location.assign(done.next); })
        .catch(function (err) { say(status, explain(err), true); button.disabled = false; });
    });
  }

  // The call page's "Approve with a passkey" button sits in the approve
  // form: the form's fields (digest, typed confirmation, acknowledged
  // warning, comment) go with both halves of the ceremony, and the server
  // checks them as it checks a click.
  function approve(button) {
    var form = button.form, status = form.querySelector("[data-passkey-status]");
    button.addEventListener("click", function () {
      if (!supported(status)) return;
      if (form.reportValidity && !form.reportValidity()) return;
      var fields = {};
      new FormData(form).forEach(function (v, k) { fields[k] = v; });
      button.disabled = true;
      say(status, "Follow your browser's prompt: your passkey signs this call's digest.", false);
      post(button.getAttribute("data-begin"), fields)
        .then(function (begun) {
          return navigator.credentials.get({ publicKey: requestOptions(begun.options.publicKey) })
            .then(function (cred) {
              var done = Object.assign({}, fields, { ceremony: begun.ceremony, response: credentialJSON(cred) });
              return post(button.getAttribute("data-finish"), done);
            });
        })
        .then(function (done) { window.location.assign(done.next); })
        .catch(function (err) { say(status, explain(err), true); button.disabled = false; });
    });
  }

  function bind(root) {
    var reg = document.getElementById("passkey-register");
    if (reg && !reg.hasAttribute("data-bound")) { reg.setAttribute("data-bound", "1"); register(reg); }
    var buttons = (root || document).querySelectorAll("button[data-passkey-approve]");
    for (var i = 0; i < buttons.length; i++) {
      if (buttons[i].hasAttribute("data-bound")) continue;
      buttons[i].setAttribute("data-bound", "1");
      approve(buttons[i]);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    bind(document);
    // The call page's status block is replaced over the socket.
    document.body.addEventListener("htmx:wsAfterMessage", function () { bind(document); });
  });
})();
