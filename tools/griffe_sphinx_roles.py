"""A griffe extension for the docs build: Sphinx roles in docstrings become mkdocstrings links.

The docstrings are written for ``help()`` and IDEs, with Sphinx roles such as
``:class:`RunContext``` and ``:meth:`~RunContext.check```. mkdocstrings renders docstrings as
Markdown, where such a role would show up verbatim. This extension rewrites each role, once the
whole package is loaded, into an autorefs link
``[`RunContext`][diagnosis_harness._context.RunContext]`` when the name resolves to an object of
the package, and into plain code otherwise (a name from another library, say). The build runs with
``--strict``, so a link that does not land fails it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from griffe import Alias, Extension, Object

if TYPE_CHECKING:
    from griffe import GriffeLoader, Module

_ROLE = re.compile(
    r":(?:class|func|meth|attr|exc|data|mod|obj):`(?P<tilde>~?)(?P<name>[\w.]+)(?:\(\))?`"
)


def _resolve(obj: Object, name: str, loader: GriffeLoader) -> str | None:
    """The full path ``name`` means in the scope of ``obj``, or None if it is not ours."""
    if name in loader.modules_collection:  # a full dotted path to a package object
        return name
    head, _, rest = name.partition(".")
    scope: Object | Alias | None = obj
    while scope is not None:
        try:
            path = scope.resolve(head)
        except Exception:  # griffe raises NameResolutionError; any failure means "not here"
            scope = scope.parent
            continue
        full = f"{path}.{rest}" if rest else path
        return full if full in loader.modules_collection else None
    return None


def _rewrite(obj: Object, loader: GriffeLoader) -> None:
    if obj.docstring is not None:

        def link(match: re.Match[str]) -> str:
            name = match["name"]
            shown = name.rsplit(".", 1)[-1] if match["tilde"] else name
            target = _resolve(obj, name, loader)
            return f"[`{shown}`][{target}]" if target is not None else f"`{shown}`"

        obj.docstring.value = _ROLE.sub(link, obj.docstring.value)
    for member in obj.members.values():
        if not isinstance(member, Alias):  # an alias's docstring is its target's, rewritten there
            _rewrite(member, loader)


class SphinxRoles(Extension):
    """Rewrite the Sphinx roles of every docstring of a loaded package."""

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:  # noqa: ARG002 - griffe's hook signature
        _rewrite(pkg, loader)
