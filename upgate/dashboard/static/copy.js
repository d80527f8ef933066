// The new key's copy button: the only script of the dashboard (no build, nothing fetched).
document.querySelectorAll("button.copy").forEach(function (button) {
  button.addEventListener("click", function () {
    var field = document.getElementById(button.dataset.copy);
    field.select();
    var done = function () { button.textContent = button.dataset.done; };
    if (navigator.clipboard) {
      navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
    } else {
      document.execCommand("copy");
      done();
    }
  });
});
