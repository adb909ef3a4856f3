"""Step templates: Jinja2 in a sandbox, checked when a spec is pulled, rendered by the runner.

A step's ``system`` and ``prompt`` are Jinja2 templates rendered with three names:
``input`` (the invoke body), ``steps`` (the outputs of the step's own deps) and ``vars``
(the spec's constants). They run in Jinja2's immutable sandbox (no attribute access to
Python internals, no mutation of the context, no files, no network) with
``StrictUndefined``: a name the context lacks is an error, never an empty string.

This module compiles, checks and renders; it does no I/O and calls no model.
"""

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.environment import Template
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE_KEYS = ("system", "prompt", "query")
"""The ``with`` keys of built-in tools that hold templates."""

ENVIRONMENT = ImmutableSandboxedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
)
"""The one environment every step template is compiled in."""


class TemplateInvalid(ValueError):
    """A template does not parse, or reads a step that is not one of its step's deps."""


class RenderFailed(ValueError):
    """A template could not be rendered for one call (an undefined name, a sandbox refusal)."""


def compile_template(source: str) -> Template:
    """The compiled template; raises ``TemplateInvalid`` naming the line of a syntax error."""
    try:
        return ENVIRONMENT.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateInvalid(
            f"template syntax error on line {exc.lineno}: {exc.message}"
        ) from None


def check_template(source: str, *, deps: Collection[str]) -> None:
    """Raises ``TemplateInvalid`` when ``source`` does not parse, or reads ``steps.X`` (or
    ``steps["X"]``) where X is not in ``deps``."""
    try:
        tree = ENVIRONMENT.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateInvalid(
            f"template syntax error on line {exc.lineno}: {exc.message}"
        ) from None
    for name, lineno in _steps_read(tree):
        if name not in deps:
            known = ", ".join(sorted(deps)) if deps else "none"
            raise TemplateInvalid(
                f"line {lineno} reads steps.{name}, which is not a dependency of this step "
                f"(deps: {known})"
            )


def _steps_read(tree: nodes.Template) -> Iterator[tuple[str, int]]:
    """Each constant name read from ``steps`` (``steps.x``, ``steps['x']``) with its line."""
    # steps.items(), steps.keys(): methods of the mapping, not steps it reads
    called = {id(call.node) for call in tree.find_all(nodes.Call)}
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getattr) and _is_steps(node.node) and id(node) not in called:
            yield node.attr, node.lineno
        elif (
            isinstance(node, nodes.Getitem)
            and _is_steps(node.node)
            and isinstance(node.arg, nodes.Const)
            and isinstance(node.arg.value, str)
        ):
            yield node.arg.value, node.lineno


def _is_steps(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "steps"


def render(template: Template, context: Mapping[str, Any]) -> str:
    """``template`` rendered with ``context``; raises ``RenderFailed`` with Jinja2's message
    (``'dict object' has no attribute 'x'``, a sandbox refusal, a filter's error)."""
    try:
        return template.render(context)
    except TemplateError as exc:
        raise RenderFailed(f"{type(exc).__name__}: {exc.message or exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        raise RenderFailed(f"{type(exc).__name__}: {exc}") from None
