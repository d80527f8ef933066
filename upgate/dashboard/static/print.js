// The receipt's Print button (no inline script: the pages' CSP allows only this origin's files).
document.querySelectorAll("[data-print]").forEach(function (b) {
  b.addEventListener("click", function () { window.print(); });
});
