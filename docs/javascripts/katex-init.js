// Typeset the maths that pymdownx.arithmatex (generic mode) marks: <span class="arithmatex">\(...\)</span>
// inline and <div class="arithmatex">\[...\]</div> displayed, with the KaTeX shipped in
// docs/javascripts/katex/ (no network). Material's document$ fires on every page load.
(function () {
  function typeset(root) {
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      var display = el.tagName === "DIV";
      var tex = el.textContent.trim().replace(/^\\[([]/, "").replace(/\\[)\]]$/, "");
      katex.render(tex, el, { displayMode: display, throwOnError: false });
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { typeset(document.body); });
  } else {
    document.addEventListener("DOMContentLoaded", function () { typeset(document.body); });
  }
})();
