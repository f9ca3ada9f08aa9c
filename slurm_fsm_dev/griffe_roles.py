"""A griffe extension for the API site: Sphinx roles in docstrings become links.

The docstrings use Sphinx's roles (``:class:`~slurm_fsm.errors.JobNotFound```,
``:meth:`AllocationMachine.prepare```); the site's docstring style (Google, rendered
as Markdown by mkdocstrings) does not know them and would print the role itself.
After griffe has loaded the package, every docstring's roles are rewritten into an
optional autorefs cross-reference: a link where the target is on the site, the name
in code where it is not. Names are resolved in the docstring's own scope (its
module's imports and members), as Sphinx would; ``~`` keeps only the last part.

Configured in mkdocs.yml (``extensions:`` of the python handler); the docstrings
themselves stay as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import griffe

__all__ = ["ROLE", "SphinxRoles", "roles_to_refs"]

#: ``:class:`X```, ``:func:`~a.b.c```, ``:py:meth:`X.y``` ... (the roles Sphinx' Python
#: domain has). The target may carry a title: ``:class:`the spec <JobSpec>```.
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|mod|data|exc|obj|const|type):"
    r"`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")


def roles_to_refs(text: str, resolve: Callable[[str], str | None]) -> str:
    """``text`` with each Sphinx role replaced by an optional cross-reference
    (``<autoref identifier=... optional><code>name</code></autoref>``); a target that
    ``resolve`` cannot place stays as the name in code."""

    def one(m: re.Match[str]) -> str:
        body = m.group("body").strip()
        titled = _TITLED.match(body)
        if titled:
            title, target = titled.group("title"), titled.group("target").strip()
        else:
            target = body
            title = ""
        short = target.startswith("~")
        target = target.lstrip("~.!")
        if not title:
            title = target.rsplit(".", 1)[-1] if short else target
        code = f"<code>{_escape(title)}</code>"
        identifier = resolve(target)
        if identifier is None:
            return code
        return f'<autoref identifier="{_escape(identifier)}" optional>{code}</autoref>'

    return ROLE.sub(one, text)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") \
        .replace('"', "&quot;")


def _resolver(obj: griffe.Object) -> Callable[[str], str | None]:
    def resolve(target: str) -> str | None:
        head, _, rest = target.partition(".")
        for scope in (obj, obj.parent):
            if scope is None:
                continue
            try:
                full = scope.resolve(head)
            except (griffe.NameResolutionError, AttributeError, KeyError):
                continue
            return f"{full}.{rest}" if rest else full
        if "." in target:  # a full dotted path (slurm_fsm.errors.JobNotFound)
            return target
        return None

    return resolve


def _walk(obj: griffe.Object, seen: set[str]) -> Iterator[griffe.Object]:
    if obj.path in seen:
        return
    seen.add(obj.path)
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Alias):
            continue  # documented where it is defined
        yield from _walk(member, seen)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg, set()):
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = roles_to_refs(obj.docstring.value, _resolver(obj))
