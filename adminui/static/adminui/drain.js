// Drain dashboard: poll the JSON twin of this page every few seconds and redraw the tables,
// so ops can watch a rollout finish without reloading. Falls back to <noscript> refresh.
(function () {
  "use strict";
  var root = document.getElementById("drain");
  if (!root) return;
  var url = root.getAttribute("data-json-url");
  var stamp = document.getElementById("drain-updated");
  var EVERY_MS = 3000;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function draw(data) {
    var parts = [];
    data.bundles.forEach(function (b) {
      parts.push(el("h2", {}, [el("a", {href: b.url}, [b.bundle])]));
      var rows = b.versions.map(function (v) {
        return el("tr", {"data-version": String(v.number), "data-state": v.state}, [
          el("td", {}, [el("a", {href: v.url}, ["v" + v.number])]),
          el("td", {}, [el("span", {"class": "state state-" + v.state}, [v.state])]),
          el("td", {}, [v.labels.join(", ")]),
          el("td", {"class": "sessions"}, [el("a", {href: v.sessions_url}, [String(v.active_sessions)])]),
          el("td", {"class": "draining-since"}, [v.draining_since_text]),
          el("td", {"class": "drained-at"}, [v.drained_at_text]),
          el("td", {"class": "evidence"}, [v.evidence_text])
        ]);
      });
      var head = el("tr", {}, ["Version", "State", "Labels", "Active sessions", "Draining since (UTC)", "Drained at (UTC)", "Evidence"].map(
        function (t) { return el("th", {}, [t]); }));
      parts.push(el("table", {"class": "adminui-table drain-table", "data-bundle": b.bundle},
        [el("thead", {}, [head]), el("tbody", {}, rows)]));
    });
    if (!parts.length) parts.push(el("p", {}, ["No version has been released yet."]));
    root.replaceChildren.apply(root, parts);
    if (stamp) stamp.textContent = "updated " + data.at.substring(11, 19) + " UTC";
  }

  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(draw)
      .catch(function () { if (stamp) stamp.textContent = "could not refresh; retrying"; })
      .then(function () { window.setTimeout(poll, EVERY_MS); });
  }
  window.setTimeout(poll, EVERY_MS);
})();
