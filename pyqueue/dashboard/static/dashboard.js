// The jobq dashboard's only script (served from /static, allowed by the
// Content-Security-Policy's script-src 'self'). Pages work without it; it
// adds two things:
// - live refresh: every data-refresh seconds (on <body>) re-fetch this page
//   and swap the new <main> in, without a full reload; skipped while the
//   user is selecting jobs or typing in a form, or the tab is hidden;
// - confirmation of forms carrying data-confirm.
(function () {
  "use strict";

  function busy(main) {
    if (main.querySelector("input[type=checkbox]:checked")) { return true; }
    var active = document.activeElement;
    return !!(active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  function refresh() {
    var main = document.getElementById("main");
    if (!main || document.hidden || busy(main)) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        var current = document.getElementById("main");
        if (fresh && current && !busy(current)) {
          current.replaceChildren.apply(current, Array.prototype.slice.call(fresh.childNodes));
          document.body.setAttribute("data-refreshed", new Date().toISOString());
        }
      })
      .catch(function (error) {
        document.body.setAttribute("data-refresh-error", String(error));
      });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var seconds = parseFloat(document.body.getAttribute("data-refresh") || "0");
    if (seconds > 0) { window.setInterval(refresh, seconds * 1000); }
  });
}());
