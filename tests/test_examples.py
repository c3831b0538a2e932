"""Every example the user reads runs as a test, so that what it shows is what the code returns.

- Docstrings: every ``>>>`` example in a module of ``mianalysis`` (found by
  :class:`doctest.DocTestFinder`) runs as a doctest, each in a fresh namespace (an example
  imports what it uses) and in an empty temporary folder (an example may write files).
- README.md: every ```` ```python ```` block runs, each in a fresh namespace and an empty
  temporary folder. A block with ``>>>`` prompts is a doctest; a script block runs as is,
  and if a ```` ```text ```` block follows it (only blank lines between), that block is
  its expected standard output. A block is skipped only if the line above its fence is
  ``<!-- example: skip (REASON) -->``, REASON saying why it cannot run as a test.

Only NORMALIZE_WHITESPACE is on for all examples (array reprs wrap differently). An
example whose output legitimately varies must ask for ``# doctest: +ELLIPSIS`` on its own
line; numbers are shown rounded, not elided.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import importlib.util
import io
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import mianalysis

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
OPTIONFLAGS = doctest.NORMALIZE_WHITESPACE


# ---------------------------------------------------------------------------- running


def run_doctest(test):
    """Run one DocTest; return the failure report ('' if it passed)."""
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS, verbose=False)
    report = []
    runner.run(test, out=report.append, clear_globs=True)
    return "".join(report) if runner.failures else ""


# ---------------------------------------------------------------------------- docstrings


def _modules_with_examples():
    """Modules of the package whose source has a ``>>>`` prompt, imported (only those:
    importing every module would load PyTorch and Matplotlib for nothing)."""
    names = []
    for info in pkgutil.walk_packages(mianalysis.__path__, prefix="mianalysis."):
        spec = importlib.util.find_spec(info.name)
        if spec.origin and spec.origin.endswith(".py") and ">>>" in Path(spec.origin).read_text():
            names.append(info.name)
    return [importlib.import_module(name) for name in sorted(names)]


def _docstring_examples():
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = {}
    for module in _modules_with_examples():
        # globs={}: an example must import what it uses, as a reader who copies it would.
        tests[module.__name__] = sorted((t for t in finder.find(module, globs={}) if t.examples),
                                        key=lambda t: t.name)
    return tests


EXAMPLES_BY_MODULE = _docstring_examples()
DOCSTRING_EXAMPLES = [t for tests in EXAMPLES_BY_MODULE.values() for t in tests]


# Examples of an optional extra's features need its packages: they skip where it is absent
# (`make test` installs every extra, so they run there and in CI).
EXTRA_PACKAGES = {"mianalysis.dumps.arrays.to_dask": ("dask",), "mianalysis.dumps.arrays.to_xarray": ("dask", "xarray")}


@pytest.mark.parametrize("test", DOCSTRING_EXAMPLES, ids=lambda t: t.name)
def test_docstring_example(test, in_tmp_dir):
    for package in EXTRA_PACKAGES.get(test.name, ()):
        pytest.importorskip(package)
    report = run_doctest(test)
    assert not report, f"\n{report}"


def test_docstring_examples_are_found():
    # A finder that silently finds nothing would pass every test above, and a >>> prompt
    # outside a docstring (a comment, a string) would never run.
    assert all(EXAMPLES_BY_MODULE.values()), {m: len(t) for m, t in EXAMPLES_BY_MODULE.items()}
    names = {t.name for t in DOCSTRING_EXAMPLES}
    for expected in ("mianalysis.estimators.gaussian.gaussian_mi", "mianalysis.estimators.ksg.ksg_mi",
                     "mianalysis.estimators.significance.mi_permutation_test",
                     "mianalysis.estimators.distances.paired_distances", "mianalysis.estimators.distances.mean_paired_distance",
                     "mianalysis.dumps.format.ParameterDump", "mianalysis.analysis.assemble.analyze",
                     "mianalysis.federated.aggregation.and_mask"):
        assert expected in names, sorted(names)


# Public names without an Examples section, and why.
NO_EXAMPLES = {
    "DumpError": "an exception",
    "LockedError": "an exception; tests/test_locking.py shows when it is raised",
    "ConstantFeatureWarning": "a warning; tests/test_degenerate_data.py shows when it is raised",
    "PermutationTestResult": "what mi_permutation_test returns; its example shows it",
    "AdditivePrediction": "what additive_model_mi and isotropic_additive_mi return; their examples show it",
    "AdditiveTest": "what additive_model_test returns; its example shows it",
    "ParameterSampler": "trains PyTorch models; the README's dump example runs it",
}


def test_exemptions_name_public_objects():
    assert set(NO_EXAMPLES) <= set(mianalysis.__all__)


@pytest.mark.parametrize("name", sorted(set(mianalysis.__all__) - set(NO_EXAMPLES)))
def test_public_functions_have_examples(name):
    obj = getattr(mianalysis, name)
    assert "Examples\n" in obj.__doc__ and ">>>" in obj.__doc__, f"{name} has no Examples section"


# ---------------------------------------------------------------------------- README.md

FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
DIRECTIVE = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->$")
SKIP = re.compile(r"^skip \((.+)\)$")


@dataclass
class Block:
    language: str
    text: str = field(repr=False)
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence
    directive: str | None = None
    output: str | None = None  # a ```text block right after a script block


def markdown_blocks(markdown):
    """Fenced blocks of a Markdown text, each with the example directive above its fence."""
    lines = markdown.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if i == len(lines):
            raise ValueError(f"line {start + 1}: fenced block is not closed")
        above = lines[start - 1].strip() if start > 0 else ""
        directive = DIRECTIVE.match(above)
        blocks.append(Block(match.group(1), "\n".join(lines[start + 1 : i]) + "\n", start + 1, i + 1,
                            directive.group(1) if directive else None))
        i += 1
    # A ```text block right after a python block (blank lines between) is its output.
    for prev, block in zip(blocks, blocks[1:]):
        between = lines[prev.end : block.line - 1]
        if prev.language == "python" and block.language == "text" and not any(s.strip() for s in between):
            prev.output = block.text
    return blocks


def python_blocks(markdown, source="README.md"):
    blocks = [b for b in markdown_blocks(markdown) if b.language == "python"]
    placed = sum(b.directive is not None for b in blocks)
    if placed != sum(bool(DIRECTIVE.match(line.strip())) for line in markdown.splitlines()):
        raise ValueError(f"{source}: an example directive must be the line right above a ```python fence")
    for b in blocks:
        if b.directive is not None and not SKIP.match(b.directive):
            raise ValueError(f"{source}:{b.line}: unknown example directive {b.directive!r}; "
                             "the only one is 'skip (REASON)'")
        if ">>>" in b.text and b.output is not None:
            raise ValueError(f"{source}:{b.line}: a block with >>> prompts shows its own output; "
                             "it cannot also have a ```text output block")
    return blocks


def run_block(block, source="README.md"):
    """Run one python block in the current folder; return the failure report ('' if it passed)."""
    name = f"{source}:{block.line}"
    if ">>>" in block.text:
        test = doctest.DocTestParser().get_doctest(block.text, {}, name, source, block.line)
        return run_doctest(test)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(block.text, name, "exec"), {"__name__": "__readme__"})
    if block.output is None:
        return ""
    got = "\n".join(line.rstrip() for line in stdout.getvalue().rstrip("\n").splitlines())
    want = "\n".join(line.rstrip() for line in block.output.rstrip("\n").splitlines())
    return "" if got == want else f"{name}: printed\n{got}\nbut the README shows\n{want}"


README_BLOCKS = python_blocks(README.read_text())


@pytest.mark.parametrize("block", README_BLOCKS, ids=lambda b: f"README.md:{b.line}")
def test_readme_example(block, in_tmp_dir, single_threaded_torch):
    if block.directive is not None:
        pytest.skip(f"README.md:{block.line}: {SKIP.match(block.directive).group(1)}")
    report = run_block(block)
    assert not report, f"\n{report}"


def test_readme_examples_are_found_and_rarely_skipped():
    assert len(README_BLOCKS) >= 1  # the front page's example; the rest of the examples are in docs/ (test_docs.py)
    assert sum(b.directive is not None for b in README_BLOCKS) <= 1


# ---------------------------------------------------------------------------- the harness itself


FAKE_README = '''
Text.

```python
>>> 1 + 1
2
```

```python
print("a  b")
```

```text
a  b
```

<!-- example: skip (needs a GPU) -->
```python
raise SystemExit("not run")
```

```
not python
```
'''


def test_harness_reads_blocks_outputs_and_directives():
    blocks = python_blocks(FAKE_README)
    assert [(b.line, b.directive, b.output) for b in blocks] == [
        (4, None, None), (9, None, "a  b\n"), (18, "skip (needs a GPU)", None)]


def test_harness_passes_correct_examples(in_tmp_dir):
    blocks = python_blocks(FAKE_README)
    assert run_block(blocks[0]) == "" and run_block(blocks[1]) == ""


@pytest.mark.parametrize("wrong, index", [(FAKE_README.replace("2\n```", "3\n```"), 0),
                                          (FAKE_README.replace("```text\na  b", "```text\na  c"), 1)])
def test_harness_fails_on_wrong_output(wrong, index, in_tmp_dir):
    blocks = python_blocks(wrong)
    assert run_block(blocks[index]) != "" and run_block(blocks[1 - index]) == ""


def test_harness_fails_on_errors(in_tmp_dir):
    with pytest.raises(ZeroDivisionError):
        run_block(python_blocks("```python\n1 / 0\n```\n")[0])
    assert "ZeroDivisionError" in run_block(python_blocks("```python\n>>> 1 / 0\n0\n```\n")[0])


@pytest.mark.parametrize("bad", ["<!-- example: skip -->\n```python\npass\n```\n",
                                 "<!-- example: run later -->\n```python\npass\n```\n",
                                 "```python\n>>> 1\n1\n```\n```text\n1\n```\n",
                                 "```python\npass\n",
                                 "<!-- example: skip (far from its block) -->\n\n```python\npass\n```\n"])
def test_harness_rejects_unclear_markup(bad):
    with pytest.raises(ValueError):
        python_blocks(bad)
