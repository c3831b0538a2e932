"""A Griffe extension for the API pages (mkdocs.yml: mkdocstrings' ``extensions``).

- Maths: the docstrings write reST maths (numpydoc's convention): ``.. math::`` blocks and
  ``:math:`...``` roles, which mkdocstrings' numpy style leaves as text. They become
  ``\\[...\\]`` blocks and ``\\(...\\)`` spans before the docstrings are parsed, which
  ``pymdownx.arithmatex`` (generic mode) marks for KaTeX (docs/javascripts/katex-init.js).
- Public names only: a module's members are those of its ``__all__`` (Griffe's rule for
  ``filters: public``), and a name with a leading underscore is never shown, dunders
  included (``__init__``, ``__post_init__``), as the former ``filters: ["!^_"]`` did.
"""

from __future__ import annotations

import re

import griffe

DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<rest>.*)$")
ROLE = re.compile(r":math:`([^`]+)`")
OPTION = re.compile(r"^:[\w-]+:")  # a directive option such as :label: or :nowrap:


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def convert_math(text: str) -> str:
    """`text` with each ``.. math::`` block as ``\\[...\\]`` blocks (one per equation: reST
    separates equations by blank lines) at the directive's indentation, and each
    ``:math:`x``` role as ``\\(x\\)``."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        if not match:
            out.append(ROLE.sub(r"\\(\1\\)", lines[i]))
            i += 1
            continue
        indent, level = match["indent"], len(match["indent"])
        body = [match["rest"]] if match["rest"].strip() else []
        i += 1
        # the directive's content: the lines indented deeper than it, and blank lines between them
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > level):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():  # trailing blank lines belong to the text after
            body.pop()
            i -= 1
        equations: list[list[str]] = [[]]
        for line in body:
            if not line.strip():
                equations.append([])
            elif not (OPTION.match(line.strip()) and not any(equations)):
                equations[-1].append(line.strip())
        for equation in filter(None, equations):
            out += ["", f"{indent}\\[", *(indent + line for line in equation), f"{indent}\\]", ""]
    return "\n".join(out)


class APIPages(griffe.Extension):
    """Convert reST maths in every docstring of the package, and hide underscore names."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        self._visit(pkg)

    def _visit(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert_math(obj.docstring.value)
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.name.startswith("_"):
                member.public = False
            self._visit(member)
