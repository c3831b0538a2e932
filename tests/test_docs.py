"""The documentation site (mkdocs.yml, docs/): its pages, links, examples and build.

Always on, and cheap: every page in the nav exists and every Markdown page is in the nav;
every relative link of docs/*.md and of README.md (the front page) points to an existing
file; docs/cli-reference.md is what ``python docs/gen_cli_reference.py`` writes
from the current parser; every ```python block of docs/ runs, as the README's do
(tests/test_examples.py). Where mkdocs is installed (the ``docs`` extra, or ``make docs``'s
.venv-docs), ``mkdocs build --strict`` must pass: mkdocstrings then also resolves every
API page against the package's source.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_examples import python_blocks, run_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"
# Pages not in the nav, and why.
NOT_IN_NAV = {}
# The Markdown tables the experiments write (experiments/_results.py): not pages of their own
# (mkdocs.yml's exclude_docs) but included into the results pages by pymdownx.snippets.
TABLES = "results/tables/"
INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"([^"]+)"[ \t]*$', flags=re.M)


def nav_pages():
    """The .md paths listed under ``nav:`` in mkdocs.yml (read without a YAML parser)."""
    text = MKDOCS_YML.read_text()
    nav = text.split("\nnav:\n", 1)[1]
    nav = re.split(r"\n(?=\S)", nav, maxsplit=1)[0]  # up to the next top-level key
    return re.findall(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$", nav, flags=re.M)


def markdown_pages():
    pages = (p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    return sorted(p for p in pages if not p.startswith(TABLES))


def committed_tables():
    """The experiments' tables under docs/results/tables/, less the ``--quick`` ones (not
    committed: .gitignore)."""
    return sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / TABLES).glob("*.md") if "_quick" not in p.name)


def test_every_result_table_is_included_by_one_page_and_every_include_exists():
    includes = [(page, target) for page in markdown_pages() for target in INCLUDE.findall((DOCS / page).read_text())]
    missing = [(page, t) for page, t in includes if not (DOCS / t).is_file()]
    assert not missing, f"pages include missing files: {missing}"
    assert all(t.startswith(TABLES) for _, t in includes), includes
    included = sorted(t for _, t in includes)
    assert len(committed_tables()) >= 10
    assert included == committed_tables(), "each table in docs/results/tables/ is included by exactly one page"


def test_mkdocs_includes_the_tables_and_does_not_build_them_as_pages():
    text = MKDOCS_YML.read_text()
    exclude = text.split("\nexclude_docs: |\n", 1)[1].split("\n\n", 1)[0].split()
    assert TABLES in exclude
    snippets = text.split("- pymdownx.snippets:\n", 1)[1].split("\n\n", 1)[0]
    assert "base_path: !relative $docs_dir" in snippets and "check_paths: true" in snippets
    pages = [p.name for p in (ROOT / "figures").rglob("*.md") if p.name != "README.md"]
    assert not pages, f"result pages live in docs/results/, not figures/: {pages}"


def test_nav_pages_exist_and_every_page_is_in_the_nav():
    listed = nav_pages()
    assert len(listed) >= 20, listed
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"
    missing = [page for page in listed if not (DOCS / page).is_file()]
    assert not missing, f"nav pages missing from docs/: {missing}"
    omitted = sorted(set(markdown_pages()) - set(listed) - set(NOT_IN_NAV))
    assert not omitted, f"pages in docs/ but not in mkdocs.yml's nav: {omitted}"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(markdown):
    """Targets of the inline links and images of a Markdown text, outside code blocks and spans."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor in the same page
        targets.append(target.split("#", 1)[0])
    return targets


def resolve(page, target):
    """The file a relative link of ``page`` points to; the site serves the repository's
    figures/ as docs/figures/ (docs/hooks.py)."""
    path = (page.parent / target).resolve()
    figures = (DOCS / "figures").resolve()
    if path.is_relative_to(figures):
        path = ROOT / "figures" / path.relative_to(figures)
    return path


@pytest.mark.parametrize("page", markdown_pages())
def test_relative_links_point_to_files(page):
    path = DOCS / page
    broken = [t for t in relative_links(path.read_text()) if not resolve(path, t).exists()]
    assert not broken, f"docs/{page}: links to missing files: {broken}"


def test_readme_links_point_to_files():
    broken = [t for t in relative_links((ROOT / "README.md").read_text()) if not (ROOT / t).exists()]
    assert not broken, f"README.md: links to missing files: {broken}"


def test_link_checker_finds_links():
    links = relative_links("[a](b.md) ![c](../figures/d.png) [e](https://x.org) [f](#g) `[h](i.md)`\n"
                           "```\n[j](k.md)\n```\n[l](m.md#n)")
    assert links == ["b.md", "../figures/d.png", "m.md"]
    assert resolve(DOCS / "results" / "x.md", "../figures/a.png") == ROOT / "figures" / "a.png"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="argparse wraps help differently across Python versions; the reference is made on 3.11")
def test_cli_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", DOCS / "gen_cli_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (DOCS / "cli-reference.md").read_text() == gen.render(), \
        "docs/cli-reference.md is out of date: run python docs/gen_cli_reference.py"


DOC_BLOCKS = [(page, block) for page in markdown_pages() if page not in NOT_IN_NAV
              for block in python_blocks((DOCS / page).read_text(), f"docs/{page}")]


@pytest.mark.parametrize("page, block", DOC_BLOCKS, ids=lambda v: v if isinstance(v, str) else str(v.line))
def test_docs_example(page, block, in_tmp_dir, single_threaded_torch):
    if block.directive is not None:
        pytest.skip(f"docs/{page}:{block.line}: {block.directive}")
    report = run_block(block, f"docs/{page}")
    assert not report, f"\n{report}"


def test_docs_examples_are_found():
    assert len(DOC_BLOCKS) >= 5


def _mkdocs_command():
    if all(importlib.util.find_spec(m) for m in ("mkdocs", "material", "mkdocstrings_handlers")):
        return [sys.executable, "-m", "mkdocs"]
    venv = ROOT / ".venv-docs" / "bin" / "mkdocs"  # made by `make docs`
    return [str(venv)] if venv.exists() else None


NO_MKDOCS = pytest.mark.skipif(_mkdocs_command() is None,
                               reason="mkdocs not installed (pip install -e '.[docs]', or make docs)")


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site, built once per test run by ``mkdocs build --strict``: under pytest-xdist the
    first worker that needs it builds it into the run's shared temporary folder and the others
    wait for it (a lock file) and read the same site, instead of each building its own."""
    import fcntl
    import os

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this run's folder, above each worker's own
    site = shared / "docs-site"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not site.is_dir():  # made by a build that passed; a failed one leaves nothing for the next to reuse
            building = shared / f"docs-site-{os.getpid()}"
            result = subprocess.run([*_mkdocs_command(), "build", "--strict", "--config-file", str(MKDOCS_YML),
                                     "--site-dir", str(building)], capture_output=True, text=True, cwd=ROOT,
                                    env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600)
            if result.returncode != 0:
                shutil.rmtree(building, ignore_errors=True)
            assert result.returncode == 0, result.stderr[-4000:]
            building.rename(site)
    return site


@NO_MKDOCS
def test_mkdocs_build_strict(built_site):
    site = built_site
    assert (site / "index.html").exists() and (site / "api" / "estimators" / "index.html").exists()
    assert "record_runs" in (site / "api" / "flower" / "index.html").read_text(encoding="utf-8")
    # the demo's figure is on the getting-started page; a doctest's copy button copies its code alone
    started = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert 'src="../assets/demo_mi.png"' in started and (site / "assets" / "demo_mi.png").is_file()
    dumps = (site / "guide" / "dumps" / "index.html").read_text(encoding="utf-8")
    copies = re.findall(r'data-copy="([^"]*)"', dumps)
    assert copies and all("&gt;&gt;&gt;" not in c for c in copies) and any("import torch" in c for c in copies)


# ---------------------------------------------------------------- maths, public API, layout

# Maths: the docstrings' reST maths (.. math:: blocks, :math:`...` roles) becomes \[...\] and
# \(...\) (docs/griffe_api.py), which pymdownx.arithmatex marks <div/span class="arithmatex">
# for the KaTeX that docs/javascripts/katex/ ships: no page fetches anything from the network.
ARITHMATEX = re.compile(r'<(div|span) class="arithmatex">.*?</\1>', flags=re.S)
CODE = re.compile(r"<(pre|code)\b[^>]*>.*?</\1>", flags=re.S)
RAW_MATHS = re.compile(r"\.\. math::|:math:|\$\$|\\\(|\\\[")
EXTERNAL = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')


def prose_html(page_html):
    """A page's HTML less its code (``<pre>``, ``<code>``) and its marked maths."""
    return CODE.sub("", ARITHMATEX.sub("", page_html))


def test_prose_html_keeps_only_unmarked_maths():
    page = ('<p>a <span class="arithmatex">\\(x_1\\)</span> <code>$$ :math:`y`</code></p>'
            '<div class="arithmatex">\\[\n\\sum\n\\]</div><pre><code>.. math::</code></pre><p>:math:`z` $$</p>')
    assert RAW_MATHS.findall(prose_html(page)) == [":math:", "$$"]


@pytest.mark.slow  # builds the site (tests/slow_tests.txt lists test_mkdocs_build_strict)
@NO_MKDOCS
def test_site_has_its_maths_marked_for_katex_and_nothing_from_the_network(built_site):
    pages = {p.relative_to(built_site).as_posix(): p.read_text(encoding="utf-8") for p in built_site.rglob("*.html")}
    raw = {name: sorted(set(RAW_MATHS.findall(prose_html(text)))) for name, text in pages.items()}
    raw = {name: found for name, found in raw.items() if found}
    assert not raw, f"maths left as text, not marked for KaTeX: {raw}"
    external = {name: EXTERNAL.findall(text) for name, text in pages.items() if EXTERNAL.search(text)}
    assert not external, f"pages that load scripts, styles or images from the network: {external}"
    api = pages["api/estimators/index.html"]
    assert api.count('<div class="arithmatex">\\[') >= 5 and api.count('<span class="arithmatex">\\(') >= 10
    assert "\\Lambda = \\frac{\\det R}" in api  # gaussian_mi_null's first .. math:: block
    for asset in ("javascripts/katex/katex.min.js", "javascripts/katex/katex.min.css", "javascripts/katex-init.js",
                  "javascripts/katex/fonts/KaTeX_Main-Regular.woff2"):
        assert (built_site / asset).is_file(), asset
        assert asset.endswith(".woff2") or asset in api, asset
    fonts = re.findall(r"url\((fonts/[^)]+\.woff2)\)", (built_site / "javascripts/katex/katex.min.css").read_text())
    assert fonts and all((built_site / "javascripts/katex" / f).is_file() for f in fonts)


@functools.lru_cache(maxsize=None)  # the API test asks for each module once per name it shows (300+)
def module_exports(module):
    """The ``__all__`` of a module of the package (read from its source), None where it has none
    or `module` is not a module of the package."""
    import ast

    base = ROOT.joinpath(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return frozenset(ast.literal_eval(node.value))
    return None


@pytest.mark.slow  # builds the site (tests/slow_tests.txt lists test_mkdocs_build_strict)
@NO_MKDOCS
def test_api_pages_show_each_modules_all_and_no_underscore_name(built_site):
    shown = set()
    for page in (built_site / "api").rglob("index.html"):
        shown |= set(re.findall(r'<h\d id="(mianalysis(?:\.\w+)+)"', page.read_text(encoding="utf-8")))
    assert len(shown) > 300
    outside, private = [], []
    for path in sorted(shown):
        parts = path.split(".")
        if module_exports(path) is not None:
            continue  # a module
        cut = max(i for i in range(1, len(parts)) if module_exports(".".join(parts[:i])) is not None)
        if parts[cut] not in module_exports(".".join(parts[:cut])):
            outside.append(path)
        private += [path] if any(p.startswith("_") for p in parts[cut:]) else []
    assert not outside, f"API pages show names outside their module's __all__: {outside}"
    assert not private, f"API pages show underscore names: {private}"
    assert "mianalysis.estimators.gaussian.gaussian_mi" in shown
    assert "mianalysis.estimators.gaussian.lower_solve" not in shown  # a helper, not in __all__


def test_griffe_extension_turns_rest_maths_into_arithmatex_delimiters():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_api", DOCS / "griffe_api.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    text = ("A :math:`x_1` and :math:`y`.\n\n    .. math::\n        :label: e\n\n        a = b\n"
            "          + c\n\n        d = e\n\n    after\n.. math:: z^2\n")
    assert ext.convert_math(text) == ("A \\(x_1\\) and \\(y\\).\n\n\n    \\[\n    a = b\n    + c\n    \\]\n\n\n"
                                      "    \\[\n    d = e\n    \\]\n\n\n    after\n\n\\[\nz^2\n\\]\n\n")
    assert ext.convert_math("no maths\n") == "no maths\n"


def test_nav_puts_the_user_guide_before_the_concepts():
    nav = MKDOCS_YML.read_text().split("\nnav:\n", 1)[1]
    sections = re.findall(r"^  - ([^:\n]+):", nav, flags=re.M)
    assert sections.index("User guide") < sections.index("Concepts"), sections
    assert sections[:3] == ["Home", "Getting started", "User guide"], sections


# The browser check: headless Chromium loads pages of the built site from a local server and
# measures, after KaTeX has run, whether anything of the main column (.md-content) shows
# beyond its right edge: what a wider box clips or scrolls shows only up to that box's edge,
# so a code block or table that scrolls is fine, a line that spills over the column is not.
PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var main = document.querySelector(".md-content"), edge = main.getBoundingClientRect().right + 1, beyond = [];
  if (location.search === "?wide") {
    var p = document.createElement("p"); p.textContent = "x ".repeat(2000); p.style.whiteSpace = "nowrap";
    main.querySelector("article").appendChild(p);
  }
  main.querySelectorAll("*").forEach(function (el) {
    var r = el.getBoundingClientRect(), right = r.right;
    if (getComputedStyle(el).overflowX === "visible") right = Math.max(right, r.left + el.scrollWidth);
    if (r.width === 0 || right <= edge) return;
    for (var a = el.parentElement; a && a !== main; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== "visible") right = Math.min(right, a.getBoundingClientRect().right);
    }
    if (right > edge) beyond.push(el.tagName + " " + Math.round(right - edge) + " px: " + (el.textContent || "").trim().slice(0, 60));
  });
  var doc = document.documentElement, out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify({page: doc.scrollWidth - doc.clientWidth, main: main.scrollWidth - main.clientWidth,
    beyond: beyond.slice(0, 5),
    maths: document.querySelectorAll(".arithmatex").length,
    typeset: document.querySelectorAll(".arithmatex > .katex, .arithmatex > .katex-display").length,
    errors: document.querySelectorAll(".katex-error").length});
  document.body.appendChild(out);
}, 300); });
</script>"""
BROWSER_PAGES = ("index.html", "getting-started/index.html", "api/estimators/index.html")
BROWSER_WIDTHS = (1280, 390)  # a laptop, a phone


def _chromium():
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _serve(site, missing):
    """A local HTTP server of `site` that adds PROBE to each HTML page and records the paths
    it had no file for."""
    import functools
    import http.server
    import threading

    class Handler(http.server.SimpleHTTPRequestHandler):
        def send_head(self):
            path = Path(self.translate_path(self.path))
            if path.is_dir():
                path = path / "index.html"
            if not path.is_file():
                missing.append(self.path)
            elif path.suffix == ".html":
                import io

                body = path.read_bytes().replace(b"</body>", PROBE.encode() + b"</body>")
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return io.BytesIO(body)
            return super().send_head()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _measure(url, width):
    import json

    result = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom", url],
                            capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', result.stdout, flags=re.S)
    assert found, f"{url}: no measurement (chromium exit {result.returncode}): {result.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1)))


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium (apt-get install chromium)")
@NO_MKDOCS
def test_pages_fit_their_column_and_typeset_their_maths_in_a_browser(built_site):
    missing = []
    server = _serve(built_site, missing)
    base = f"http://127.0.0.1:{server.server_port}/"
    try:
        # the check sees a line that spills over the column
        wide = _measure(base + "index.html?wide", 1280)
        assert wide["beyond"] and wide["main"] > 1000, wide
        for page in BROWSER_PAGES:
            for width in BROWSER_WIDTHS:
                seen = _measure(base + page, width)
                assert seen["page"] <= 0 and seen["main"] <= 0 and not seen["beyond"], (page, width, seen)
                assert seen["typeset"] == seen["maths"] and not seen["errors"], (page, width, seen)
                assert seen["maths"] >= 20 or not page.startswith("api/"), (page, seen)
    finally:
        server.shutdown()
    assert not [m for m in missing if not m.endswith("favicon.ico")], f"files the pages asked for and the site lacks: {missing}"


# ---------------------------------------------------------------- pages for newcomers

# Pages a newcomer copies from: code without >>> prompts (the copy button copies the code
# as it is) and code lines that fit the page's column at 1280 px (about 80 characters in
# material's layout with both sidebars), so that no comment is cut off.
NEWCOMER_PAGES = ("getting-started.md", "guide/own-loop.md")
CODE_COLUMNS = 80


@pytest.mark.parametrize("page", NEWCOMER_PAGES)
def test_newcomer_pages_have_copyable_code_that_fits(page):
    from test_examples import markdown_blocks

    blocks = markdown_blocks((DOCS / page).read_text())
    assert blocks
    prompted = [b.line for b in blocks if ">>>" in b.text]
    assert not prompted, f"docs/{page}: blocks with >>> prompts at lines {prompted}"
    # (a ```text block is output to read, such as the demo's console, not code to copy)
    wide = [(b.line, line) for b in blocks if b.language != "text" for line in b.text.splitlines()
            if len(line) > CODE_COLUMNS]
    assert not wide, f"docs/{page}: code lines wider than {CODE_COLUMNS} characters: {wide}"


# What a user writes to use mianalysis: its names, and the writer the loop records through.
OURS = re.compile(r"\b(mianalysis|DumpWriter|writer|analyze|save_figure|ParameterSampler|ModuleTask|report)\b")


def lines_of_ours(code):
    """The physical lines of `code` that use mianalysis: every simple statement that names
    it (all its lines), and the header of a compound statement (``with DumpWriter(...)``)
    that does; a training loop's own statements are not counted."""
    import ast

    source = code.splitlines()
    counted = set()
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
        if OURS.search("\n".join(source[node.lineno - 1:end])):
            counted.update(range(node.lineno, end + 1))
    return sorted(counted)


def test_lines_of_ours_counts_statements_and_headers():
    code = ("import torch\nfrom mianalysis import DumpWriter\nwith DumpWriter('d', clients=['a'],\n"
            "                checkpoints=[0], runs=1) as writer:\n    model = torch.nn.Linear(1, 1)\n"
            "    for step in range(2):\n        writer.record(run=0, client='a',\n"
            "                      checkpoint=0, params=model)\n")
    assert lines_of_ours(code) == [2, 3, 4, 7, 8]


def test_own_loop_page_is_at_most_ten_lines_of_ours():
    page = (DOCS / "guide" / "own-loop.md").read_text()
    blocks = python_blocks(page, "docs/guide/own-loop.md")
    assert len(blocks) == 2  # a training loop to a figure; a module to a figure
    for block in blocks:
        ours = lines_of_ours(block.text)
        assert 1 <= len(ours) <= 10, (block.line, ours)
        assert block.directive is None and block.output is not None and block.output.strip().endswith(".png")
        # the count the page states after the block is the count here
        after = page.splitlines()[block.end:]
        text = "\n".join(after[:after.index(next(line for line in after if line.startswith("## ")))]
                         if any(line.startswith("## ") for line in after) else after)
        stated = re.findall(r": (\d+) lines\.", text)
        assert stated and int(stated[0]) == len(ours), (block.line, stated, ours)


def test_own_loop_figure_is_what_its_script_writes_from_the_pages_block(tmp_path, single_threaded_torch):
    """docs/assets/own_loop_mi.png is written by `python docs/gen_own_loop_figure.py`, which
    runs the page's first block (the one test_docs_example runs) and copies its figure."""
    import matplotlib.image

    page = (DOCS / "guide" / "own-loop.md").read_text()
    assert "![The MI figure of this loop](../assets/own_loop_mi.png)" in page
    assert "`python docs/gen_own_loop_figure.py`" in page
    spec = importlib.util.spec_from_file_location("gen_own_loop_figure", DOCS / "gen_own_loop_figure.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.loop_block() == python_blocks(page, "docs/guide/own-loop.md")[0].text
    written = script.main(tmp_path / "figure.png")
    assert matplotlib.image.imread(written).shape == matplotlib.image.imread(DOCS / "assets" / "own_loop_mi.png").shape


def test_getting_started_shows_the_demo_as_the_benchmark_recorded_it():
    import json

    page = (DOCS / "getting-started.md").read_text()
    assert "![The demo's MI figure](assets/demo_mi.png)" in page and (DOCS / "assets" / "demo_mi.png").is_file()
    printed = (DOCS / "assets" / "demo-output.txt").read_text()
    assert f"```text\n{printed.rstrip()}\n```" in page, "the demo's output shown is not docs/assets/demo-output.txt"
    record = json.loads((ROOT / "benchmarks" / "results" / "demo.json").read_text())
    seconds = re.search(r"sampled, analysed and drawn in (\d+) s", printed).group(1)
    assert f"{seconds} s" in page and f"{record['wall_seconds']:.0f} s" in page


def _hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_copy_button_copies_a_doctest_without_prompts_or_output():
    hooks = _hooks()
    page = ('<div class="language-python highlight"><pre><span></span><code><span class="o">&gt;&gt;&gt;</span> '
            'x = [1 &lt; 2,\n<span class="o">...</span>      3]\n[True, 3]\n</code></pre></div>'
            '<div class="language-text highlight"><pre><span></span><code>plain\n</code></pre></div>')
    out = hooks.copyable(page)
    assert out.count("data-copy=") == 1
    assert 'data-copy="x = [1 &lt; 2,\n     3]\n"><pre>' in out  # the code alone, still escaped in the attribute
    assert out.replace(' data-copy="x = [1 &lt; 2,\n     3]\n"', "") == page
    assert hooks.doctest_source("print(1)\n") is None
