"""Every text the charm can put in ``juju status``, read from its source with ``ast``.

Nothing is run. A *sink* (``SINKS``) is a parameter that takes status text: the message
of a ``Summary``, the reason of a ``UnitProblem``, the cause a changeover is stuck on,
the description of a write GARM refused, and so on. The argument each call in ``src/``
gives a sink is followed back to the text it is made of:

- string literals and f-strings; ``+``; ``a if c else b``; ``a or b``;
- names, through every assignment of them in the function (``=``, ``+=``, unpacking,
  ``.append``, loops and comprehensions), or at module level, across imports;
- calls of the charm's own functions, methods and properties: their ``return``
  values, with the call's arguments bound to the parameters;
- lists and tuples built up and joined (``"; ".join``);
- an exception caught and shown: the message of every ``raise`` of its class in
  ``src/`` (through the class's ``__init__`` when it has one).

What the source cannot tell (a unit's name, a count, a parameter) is a *hole*; what is
GARM's or GitHub's own wording, or a check whose every wording is not shown on the
status page (``OPAQUE``), is one too. The result is a set of *templates*: tuples of
literal text and ``HOLE``. Text a sink is given that cannot be followed at all, where a
hole would stand for the whole message, is reported (``Texts.untraced``) rather than
silently taken as "anything".
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src"
# Definitions only (the relation contract's DatabagError): its own refusals are ``<rule>``.
LIB = REPO / "lib"


@dataclass(frozen=True)
class Sink:
    """A parameter that takes status text; ``callee`` is the class's or function's name.

    ``position`` is the argument's place for a callee defined outside the repository
    (ops' statuses); otherwise it is read from the definition. ``optional``: the test
    does not require such a call to exist.
    """

    callee: str
    parameter: str
    position: int | None = None
    optional: bool = False

    @property
    def label(self) -> str:
        return f"{self.callee}.{self.parameter}"


SINKS = (
    Sink("Summary", "message"),
    *(
        Sink(status, "message", 0, optional=True)
        for status in ("ActiveStatus", "BlockedStatus", "WaitingStatus", "MaintenanceStatus")
    ),
    Sink("UnitProblem", "reason"),
    Sink("Skipped", "reason"),
    Sink("HeldSpec", "reason"),
    Sink("Progress", "blocked"),
    Sink("Held", "write"),
    Sink("_plan_write", "write"),
    Sink("_held", "write"),
    Sink("DatabaseChoice", "problem"),
    Sink("DatabaseChoice", "waiting"),
    Sink("SqliteTenancy", "problem"),
    Sink("Fence", "waiting"),
    Sink("View", "missing"),
    Sink("Choice", "problem"),
    Sink("RunnerContext", "debug_ssh_problem"),
    Sink("ActionError", "error"),
    Sink("refused", "cause"),
    Sink("_held_now", "cause"),
    Sink("Awaited", "why"),
    Sink("Readiness", "stop"),
    Sink("Readiness", "refused"),
)
# ``<draft>.blocked[<scaleset id>] = <cause>``: a stuck changeover's cause, before its
# Progress is made.
BLOCKED_CAUSES = "blocked"
# The enumeration whose values are shown as they are: the phases of a changeover.
SHOWN_ENUMS = ("Phase",)
# Exceptions whose text is a hole: GARM's and GitHub's words (``garm.client``).
OPAQUE = frozenset({"GarmError", "GarmApiError", "GarmUnreachable"})
# Method names of the built-in types: a call of one is not followed into the charm.
BUILTIN_METHODS = frozenset(
    name for kind in (str, bytes, list, dict, set, tuple) for name in dir(kind)
)
MAX_DEPTH = 40


@dataclass(frozen=True)
class Hole:
    """Text the source does not tell; ``untraced`` when nothing says where it comes from."""

    untraced: str = ""


HOLE = Hole()
Token = str | Hole
Template = tuple[Token, ...]


@dataclass(frozen=True)
class Tup:
    """A tuple: each position's values."""

    items: tuple[frozenset[Value], ...]


@dataclass(frozen=True)
class Seq:
    """A list, set or iterable: its elements' values."""

    items: frozenset[Value]


Value = Template | Tup | Seq
Values = frozenset[Value]


@dataclass(frozen=True)
class Found:
    """A template and where in ``src/`` it was found (``path:line``)."""

    template: Template
    where: str


@dataclass
class Module:
    """One module's parse, and what its top level binds."""

    name: str
    path: Path
    tree: ast.Module
    source: str
    constants: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)

    @property
    def in_src(self) -> bool:
        return self.path.is_relative_to(SRC)

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"


@dataclass(frozen=True)
class Scope:
    """Where a name is looked up: a module, a function in it, the parameters bound."""

    module: Module
    function: ast.FunctionDef | None = None
    bindings: tuple[tuple[str, Values], ...] | None = None

    def bound(self, name: str) -> Values | None:
        return dict(self.bindings).get(name) if self.bindings is not None else None


def template(*parts: Token) -> Template:
    """Literal text merged, holes next to each other made one, empty text dropped."""
    out: list[Token] = []
    for part in parts:
        if part == "":
            continue
        if out and isinstance(part, str) and isinstance(out[-1], str):
            out[-1] += part
        elif isinstance(part, Hole) and out and isinstance(out[-1], Hole):
            out[-1] = HOLE
        else:
            out.append(HOLE if isinstance(part, Hole) and len(parts) > 1 else part)
    return tuple(out)


def flatten(values: Iterable[Value]) -> Iterator[Template]:
    """Every text in ``values``, lists and tuples opened."""
    for value in values:
        if isinstance(value, Tup):
            for item in value.items:
                yield from flatten(item)
        elif isinstance(value, Seq):
            yield from flatten(value.items)
        else:
            yield value


def lone_hole(text: Template) -> Hole | None:
    """The hole a template is made of alone, if it is."""
    return text[0] if len(text) == 1 and isinstance(text[0], Hole) else None


def _module_name(path: Path) -> str:
    root = SRC if path.is_relative_to(SRC) else LIB
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load(path: Path) -> Module:
    source = path.read_text()
    module = Module(_module_name(path), path, ast.parse(source, str(path)), source)
    for node in module.tree.body:
        _bind_top(module, node)
    return module


def _bind_top(module: Module, node: ast.stmt) -> None:
    """What one statement at a module's top level binds."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                module.constants[target.id] = node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        if node.value is not None:
            module.constants[node.target.id] = node.value
    elif isinstance(node, ast.FunctionDef):
        module.functions[node.name] = node
    elif isinstance(node, ast.ClassDef):
        module.classes[node.name] = node
    elif isinstance(node, ast.ImportFrom | ast.Import):
        _bind_import(module, node)


def _bind_import(module: Module, node: ast.ImportFrom | ast.Import) -> None:
    """The names an import binds: (module, name in it), or (module, None) for a module."""
    for alias in node.names:
        if isinstance(node, ast.ImportFrom):  # the charm imports absolutely
            module.imports[alias.asname or alias.name] = (node.module or "", alias.name)
        else:
            module.imports[alias.asname or alias.name] = (alias.name, None)


def _walk_function(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's own body, not of the functions or classes it defines."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                todo.append(child)


def _parameters(function: ast.FunctionDef) -> list[ast.arg]:
    args = function.args
    return [*args.posonlyargs, *args.args]


def _is_method(function: ast.FunctionDef) -> bool:
    params = _parameters(function)
    return bool(params) and params[0].arg in ("self", "cls")


def _is_property(function: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list)


def _fields(cls: ast.ClassDef) -> list[str]:
    """A class's constructor parameters: its ``__init__``'s, else its annotated fields."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return [a.arg for a in _parameters(node)[1:]]
    return [
        node.target.id
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]


def _simple_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


Position = tuple[int, int]
# A comprehension's variable is bound wherever its expression is, before or after.
ANYWHERE: Position = (0, 0)


def _position(node: ast.AST) -> Position:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


@dataclass
class _Binding:
    """One way a name is bound: to ``value``, to its ``index``-th item, or item by item.

    ``how``: ``value``, ``unpacked`` (``a, b = value``), ``appended`` (``name.append``),
    ``iterated`` (a loop over ``value``), ``caught`` (``except value as name``).
    """

    how: str
    value: ast.expr
    at: Position
    index: int | None = None


@dataclass
class _Bindings:
    """Where each name of one function is bound."""

    names: dict[str, list[_Binding]] = field(default_factory=dict)

    def add(self, name: str, binding: _Binding) -> None:
        self.names.setdefault(name, []).append(binding)

    def bind(self, target: ast.expr, value: ast.expr, at: Position, loop: bool = False) -> None:
        if isinstance(target, ast.Name):
            self.add(target.id, _Binding("iterated" if loop else "value", value, at))
        elif isinstance(target, ast.Tuple):
            for index, item in enumerate(target.elts):
                if isinstance(item, ast.Name):
                    self.add(
                        item.id, _Binding("iterated" if loop else "unpacked", value, at, index)
                    )

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.bind(target, node.value, _position(node))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            if node.value is not None:
                self.bind(node.target, node.value, _position(node))
        elif isinstance(node, ast.For):
            self.bind(node.target, node.iter, _position(node), loop=True)
        elif isinstance(node, ast.comprehension):
            self.bind(node.target, node.iter, ANYWHERE, loop=True)
        elif isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
            self.add(node.name, _Binding("caught", node.type, _position(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.attr in ("append", "add", "extend")
            and node.args
        ):
            how = "value" if node.func.attr == "extend" else "appended"
            self.add(node.func.value.id, _Binding(how, node.args[0], _position(node)))


class Texts:
    """The templates of every status text in ``src/``, and what could not be followed."""

    def __init__(self) -> None:
        paths = sorted(SRC.rglob("*.py")) + sorted(LIB.rglob("*.py"))
        self.modules = {m.name: m for m in map(_load, paths)}
        self.found: list[Found] = []
        # Where each template is first made (an f-string, a literal, a ``+``).
        self.origin: dict[Template, str] = {}
        self.untraced: list[str] = []
        # The sinks given text somewhere (``Sink.label``), the enumerations read.
        self.used: set[str] = set()
        self._bindings: dict[int, _Bindings] = {}
        self._active: set[tuple[int, str]] = set()
        self._index()
        for module in self.modules.values():
            if module.in_src:
                self._scan(module)

    # ------------------------------------------------------------------ the index

    def _index(self) -> None:
        self.classes: dict[str, list[tuple[Module, ast.ClassDef]]] = {}
        self.methods: dict[str, list[tuple[Module, ast.FunctionDef]]] = {}
        self.class_fields: set[str] = set()
        self.raises: dict[str, list[tuple[Scope, ast.Call]]] = {}
        for module in self.modules.values():
            for cls in ast.walk(module.tree):
                if isinstance(cls, ast.ClassDef):
                    self._index_class(module, cls)
        for module in self.modules.values():
            if module.in_src:
                for scope, node in self._nodes(module):
                    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                        name = _simple_name(node.exc.func)
                        self.raises.setdefault(name or "", []).append((scope, node.exc))

    def _index_class(self, module: Module, cls: ast.ClassDef) -> None:
        self.classes.setdefault(cls.name, []).append((module, cls))
        for node in cls.body:
            if isinstance(node, ast.FunctionDef):
                self.methods.setdefault(node.name, []).append((module, node))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                self.class_fields.add(node.target.id)

    def _nodes(self, module: Module) -> Iterator[tuple[Scope, ast.AST]]:
        """Every node of a module with the scope it is evaluated in."""
        functions = [n for n in ast.walk(module.tree) if isinstance(n, ast.FunctionDef)]
        inside = {id(n) for f in functions for n in _walk_function(f)}
        for node in ast.walk(module.tree):
            if id(node) not in inside:
                yield Scope(module), node
        for function in functions:
            for node in _walk_function(function):
                yield Scope(module, function), node

    def _names(self, function: ast.FunctionDef) -> _Bindings:
        if id(function) not in self._bindings:
            bindings = _Bindings()
            for node in _walk_function(function):
                bindings.visit(node)
            self._bindings[id(function)] = bindings
        return self._bindings[id(function)]

    # ------------------------------------------------------------------ the sinks

    def _scan(self, module: Module) -> None:
        """Every text a module gives a sink."""
        for scope, node in self._nodes(module):
            if isinstance(node, ast.Call):
                for sink in SINKS:
                    argument = self._argument(node, sink)
                    if argument is not None:
                        self._sink(scope, argument, sink.label)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.value, ast.Attribute)
                        and target.value.attr == BLOCKED_CAUSES
                    ):
                        self._sink(scope, node.value, BLOCKED_CAUSES)
            elif isinstance(node, ast.ClassDef) and node.name in SHOWN_ENUMS:
                self._enum(module, node)

    def _enum(self, module: Module, cls: ast.ClassDef) -> None:
        """An enumeration's values, each a text shown as it is."""
        for item in cls.body:
            if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                self._record((str(item.value.value),), module.where(item))
        self.used.add(cls.name)

    def position(self, sink: Sink) -> int:
        """Where a sink's argument is given by position."""
        if sink.position is not None:
            return sink.position
        places = {
            params.index(sink.parameter)
            for _, cls in self.classes.get(sink.callee, [])
            if sink.parameter in (params := _fields(cls))
        }
        for _, method in self.methods.get(sink.callee, []):
            params = [a.arg for a in _parameters(method)]
            if sink.parameter in params:
                places.add(params.index(sink.parameter) - _is_method(method))
        for module in self.modules.values():
            function = module.functions.get(sink.callee)
            if function is not None and sink.parameter in (
                p := [a.arg for a in _parameters(function)]
            ):
                places.add(p.index(sink.parameter))
        assert len(places) == 1, f"{sink}: no single definition takes it ({places})"
        return places.pop()

    def _argument(self, call: ast.Call, sink: Sink) -> ast.expr | None:
        """The argument a call gives a sink, if it calls the sink's callee and gives one."""
        if _simple_name(call.func) != sink.callee:
            return None
        for keyword in call.keywords:
            if keyword.arg == sink.parameter:
                return keyword.value
        position = self.position(sink)
        if len(call.args) > position and not any(
            isinstance(a, ast.Starred) for a in call.args[: position + 1]
        ):
            return call.args[position]
        return None

    def _sink(self, scope: Scope, argument: ast.expr, label: str) -> None:
        self.used.add(label)
        for text in flatten(self.resolve(argument, scope, 0)):
            hole = lone_hole(text)
            if hole is None:
                self._record(text, scope.module.where(argument))
            elif hole.untraced:
                self.untraced.append(f"{label} at {scope.module.where(argument)}: {hole.untraced}")

    def _record(self, text: Template, where: str) -> None:
        text = template(*text)
        if text and lone_hole(text) is None:
            self.found.append(Found(text, self.origin.get(text, where)))

    def _made(self, values: Iterable[Template], node: ast.AST, scope: Scope) -> Values:
        out = frozenset(values)
        for value in out:
            self.origin.setdefault(value, scope.module.where(node))
        return out

    def _record_part(self, text: Template, where: str) -> None:
        """One of several texts a placeholder can have; one word is a name, not a text."""
        if not (len(text) == 1 and isinstance(text[0], str) and len(text[0].split()) == 1):
            self._record(text, where)

    def _untraced(self, node: ast.AST, scope: Scope, why: str) -> Values:
        source = ast.get_source_segment(scope.module.source, node) or ast.dump(node)
        return frozenset({(Hole(f"{why}: {source}"),)})

    # ------------------------------------------------------------------ evaluation

    def resolve(self, node: ast.expr, scope: Scope, depth: int) -> Values:
        """The values an expression can have, as far as the source tells."""
        if depth > MAX_DEPTH:
            return frozenset({(HOLE,)})
        handler = getattr(self, f"_{type(node).__name__.lower()}", None)
        if handler is None:
            return self._untraced(node, scope, "not followed")
        return handler(node, scope, depth + 1)

    def _constant(self, node: ast.Constant, scope: Scope, depth: int) -> Values:
        if not isinstance(node.value, str):
            return frozenset({(HOLE,)})
        return self._made([template(node.value)], node, scope)

    def _joinedstr(self, node: ast.JoinedStr, scope: Scope, depth: int) -> Values:
        texts: list[Template] = [()]
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                options = self._formatted(part, scope, depth)
            else:
                options = [(str(part.value),)] if isinstance(part, ast.Constant) else [(HOLE,)]
            texts = [template(*a, *b) for a in texts for b in options]
        return self._made(texts, node, scope)

    def _formatted(self, part: ast.FormattedValue, scope: Scope, depth: int) -> list[Template]:
        """A placeholder's text when the source tells one, or one or nothing; else a hole.

        A hole for several possible texts keeps each of them as text of its own.
        """
        options = set(flatten(self.resolve(part.value, scope, depth)))
        if part.format_spec is not None:
            return [(HOLE,)]
        if part.conversion == ord("r"):
            texts = [t for t in options if all(isinstance(token, str) for token in t)]
            if len(options) == 1 and texts:
                return [(repr("".join(map(str, texts[0]))),)]
            return [(HOLE,)]
        if len(options) == 1 or (len(options) == 2 and () in options):
            return [template(*option) for option in options]
        for option in options:
            self._record_part(option, scope.module.where(part))
        return [(HOLE,)]

    def _binop(self, node: ast.BinOp, scope: Scope, depth: int) -> Values:
        if not isinstance(node.op, ast.Add):
            return frozenset({(HOLE,)})
        left, right = self.resolve(node.left, scope, depth), self.resolve(node.right, scope, depth)
        if any(isinstance(v, Tup | Seq) for v in left | right):
            return frozenset({Seq(frozenset(left | right))})
        texts = [template(*a, *b) for a in flatten(left) for b in flatten(right)]
        return self._made(texts, node, scope)

    def _ifexp(self, node: ast.IfExp, scope: Scope, depth: int) -> Values:
        return self.resolve(node.body, scope, depth) | self.resolve(node.orelse, scope, depth)

    def _boolop(self, node: ast.BoolOp, scope: Scope, depth: int) -> Values:
        return frozenset().union(*(self.resolve(v, scope, depth) for v in node.values))

    def _compare(self, node: ast.Compare, scope: Scope, depth: int) -> Values:
        return frozenset({(HOLE,)})

    def _list(self, node: ast.List | ast.Set, scope: Scope, depth: int) -> Values:
        items = frozenset().union(*(self.resolve(e, scope, depth) for e in node.elts))
        return frozenset({Seq(items)})

    _set = _list

    def _tuple(self, node: ast.Tuple, scope: Scope, depth: int) -> Values:
        return frozenset({Tup(tuple(self.resolve(e, scope, depth) for e in node.elts))})

    def _listcomp(self, node: ast.ListComp, scope: Scope, depth: int) -> Values:
        return frozenset({Seq(self.resolve(node.elt, scope, depth))})

    _generatorexp = _setcomp = _listcomp

    def _starred(self, node: ast.Starred, scope: Scope, depth: int) -> Values:
        return self.resolve(node.value, scope, depth)

    def _subscript(self, node: ast.Subscript, scope: Scope, depth: int) -> Values:
        base = self.resolve(node.value, scope, depth)
        index = node.slice
        out: set[Value] = set()
        for value in base:
            if isinstance(value, Tup) and isinstance(index, ast.Constant):
                if isinstance(index.value, int) and -len(value.items) <= index.value < len(
                    value.items
                ):
                    out |= value.items[index.value]
            elif isinstance(value, Seq):
                out |= {value} if isinstance(index, ast.Slice) else value.items
            elif isinstance(value, Tup):
                out |= frozenset().union(*value.items)
            else:
                hole = lone_hole(value) if isinstance(value, tuple) else None
                out.add((hole or HOLE,))
        return frozenset(out)

    # names

    def _name(self, node: ast.Name, scope: Scope, depth: int) -> Values:
        name = node.id
        if scope.function is not None:
            if name in {a.arg for a in self._all_parameters(scope.function)}:
                return self._parameter(name, scope)
            bindings = self._names(scope.function).names.get(name)
            if bindings:
                return self._local(node, bindings, scope, depth)
        return self._global(name, scope.module, node, depth)

    @staticmethod
    def _all_parameters(function: ast.FunctionDef) -> list[ast.arg]:
        args = function.args
        extra = [a for a in (args.vararg, args.kwarg) if a is not None]
        return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]

    def _parameter(self, name: str, scope: Scope) -> Values:
        bound = scope.bound(name)
        if bound is not None:
            return bound
        function = scope.function
        assert function is not None
        if any(s.callee == function.name and s.parameter == name for s in SINKS):
            return frozenset({(HOLE,)})  # its callers' arguments are sinks themselves
        arg = next(a for a in self._all_parameters(function) if a.arg == name)
        if arg.annotation is not None and _simple_name(arg.annotation) in OPAQUE:
            return frozenset({(HOLE,)})
        return frozenset({(Hole(f"parameter {name} of {function.name}"),)})

    def _local(self, node: ast.Name, bindings: list[_Binding], scope: Scope, depth: int) -> Values:
        """A local name's values from the bindings before it (a loop's too, for its body)."""
        assert scope.function is not None
        key = (id(scope.function), node.id)
        if key in self._active:
            return frozenset()
        self._active.add(key)
        try:
            out: set[Value] = set()
            for binding in bindings:
                if binding.at < _position(node) or binding.how == "iterated":
                    out |= self._bound(binding, scope, depth)
            return frozenset(out)
        finally:
            self._active.discard(key)

    def _bound(self, binding: _Binding, scope: Scope, depth: int) -> Values:
        if binding.how == "caught":
            return self._caught(binding.value, depth)
        values = self.resolve(binding.value, scope, depth)
        if binding.how == "appended":
            return frozenset({Seq(values)})
        if binding.how == "iterated":
            values = self._elements(values)
        return values if binding.index is None else self._pick(values, binding.index)

    @staticmethod
    def _pick(values: Values, index: int) -> Values:
        out: set[Value] = set()
        for value in values:
            if isinstance(value, Tup) and index < len(value.items):
                out |= value.items[index]
            elif isinstance(value, Seq):
                out |= Texts._pick(value.items, index)
            else:
                out.add((HOLE,))
        return frozenset(out)

    @staticmethod
    def _elements(values: Values) -> Values:
        out: set[Value] = set()
        for value in values:
            if isinstance(value, Seq):
                out |= value.items
            elif isinstance(value, Tup):
                out |= frozenset().union(*value.items)
            else:
                out.add((HOLE,))
        return frozenset(out)

    def _global(
        self, name: str, module: Module, node: ast.AST, depth: int, at: Module | None = None
    ) -> Values:
        """``name`` at module level in ``module``; ``node`` is where it is read, in ``at``
        (``module`` itself when None): the untraced report quotes it from there."""
        if name in module.constants:
            return self.resolve(module.constants[name], Scope(module), depth)
        if name in module.imports:
            source, attr = module.imports[name]
            target = self.modules.get(source)
            if target is not None and attr is not None and attr in target.constants:
                return self._global(attr, target, node, depth, at or module)
        return self._untraced(node, Scope(at or module), "not a text")

    # attributes and calls

    def _module_of(self, node: ast.expr, scope: Scope) -> Module | None:
        """The module a name stands for (``from juju import entities``, ``import x``)."""
        if not isinstance(node, ast.Name) or node.id not in scope.module.imports:
            return None
        source, attr = scope.module.imports[node.id]
        return self.modules.get(f"{source}.{attr}" if attr else source)

    def _attribute(self, node: ast.Attribute, scope: Scope, depth: int) -> Values:
        module = self._module_of(node.value, scope)
        if module is not None:
            return self._global(node.attr, module, node, depth, scope.module)
        if self._opaque(node.value, scope):
            return frozenset({(HOLE,)})
        # A property is followed when no other class has a field or property so named.
        owners = [m for m in self.methods.get(node.attr, []) if _is_property(m[1])]
        if len(owners) == 1 and node.attr not in self.class_fields:
            module, function = owners[0]
            return self._returns(module, function, {}, depth)
        if node.attr in {s.parameter for s in SINKS} | {BLOCKED_CAUSES}:
            return frozenset({(HOLE,)})  # what is given that parameter is a sink itself
        return self._untraced(node, scope, "an attribute")

    def _opaque(self, node: ast.expr, scope: Scope) -> bool:
        """Whether a name is an exception caught or typed as one of ``OPAQUE``."""
        if not isinstance(node, ast.Name) or scope.function is None:
            return False
        bindings = self._names(scope.function).names.get(node.id, [])
        kinds = [b.value for b in bindings if b.how == "caught"]
        kinds += [
            a.annotation
            for a in self._all_parameters(scope.function)
            if a.arg == node.id and a.annotation
        ]
        names = {
            _simple_name(k)
            for kind in kinds
            for k in (kind.elts if isinstance(kind, ast.Tuple) else [kind])
        }
        return bool(names) and names <= OPAQUE

    def _caught(self, kind: ast.expr, depth: int) -> Values:
        """The texts of an exception caught as ``kind``: its class's ``raise`` sites."""
        out: set[Value] = set()
        for item in kind.elts if isinstance(kind, ast.Tuple) else [kind]:
            name = _simple_name(item)
            if name in OPAQUE or name is None:
                out.add((HOLE,))
                continue
            if all(not m.in_src for m, _ in self.classes.get(name, [])):
                out.add((HOLE,))  # raised outside src/ too (the relation contract's rules)
            init = self._init(name)
            for scope, call in self.raises.get(name, []):
                if init is None:
                    out |= self.resolve(call.args[0], scope, depth) if call.args else set()
                else:
                    out |= self._call_function(init[0], init[1], call, scope, depth, message=True)
        return frozenset(out) or frozenset({(Hole(f"no raise of {ast.unparse(kind)}"),)})

    def _init(self, name: str) -> tuple[Module, ast.FunctionDef] | None:
        for module, cls in self.classes.get(name, []):
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                    return module, node
        return None

    def _call(self, node: ast.Call, scope: Scope, depth: int) -> Values:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return self.resolve(node.args[0], scope, depth)
        if isinstance(func, ast.Attribute) and func.attr == "join" and node.args:
            return self._join(node, scope, depth)
        out: set[Value] = set()
        for module, function in self._callees(func, scope):
            out |= self._call_function(module, function, node, scope, depth)
        if out:
            return frozenset(out)
        if isinstance(func, ast.Attribute) and func.attr in BUILTIN_METHODS:
            receiver = flatten(self.resolve(func.value, scope, depth))
            untraced = [h for t in receiver if (h := lone_hole(t)) is not None and h.untraced]
            return frozenset({(untraced[0] if untraced else HOLE,)})
        if _simple_name(func) in self.classes:
            return frozenset({(HOLE,)})  # an object made, not a text
        return self._untraced(node, scope, "a call not followed")

    def _join(self, node: ast.Call, scope: Scope, depth: int) -> Values:
        """``sep.join(items)``: a hole whose items are each a text of their own."""
        items = list(flatten(self._elements(self.resolve(node.args[0], scope, depth))))
        for item in items:
            self._record_part(item, scope.module.where(node))
        untraced = [h for t in items if (h := lone_hole(t)) is not None and h.untraced]
        return frozenset({(untraced[0] if untraced else HOLE,)})

    def _callees(self, func: ast.expr, scope: Scope) -> list[tuple[Module, ast.FunctionDef]]:
        """The charm's own functions a call may run."""
        if isinstance(func, ast.Name):
            module = scope.module
            if func.id in module.functions:
                return [(module, module.functions[func.id])]
            source, attr = module.imports.get(func.id, ("", None))
            target = self.modules.get(source)
            if target is not None and attr in target.functions:
                return [(target, target.functions[attr])]
            return []
        if not isinstance(func, ast.Attribute):
            return []
        module = self._module_of(func.value, scope)
        if module is not None:
            found = module.functions.get(func.attr)
            return [(module, found)] if found is not None else []
        if func.attr in BUILTIN_METHODS:
            return []
        return [m for m in self.methods.get(func.attr, []) if not _is_property(m[1])]

    def _call_function(
        self,
        module: Module,
        function: ast.FunctionDef,
        call: ast.Call,
        scope: Scope,
        depth: int,
        *,
        message: bool = False,
    ) -> Values:
        """What a call returns (``message``: the text an ``__init__`` gives Exception)."""
        params = self._all_parameters(function)
        skip = (
            1 if _is_method(function) and (message or isinstance(call.func, ast.Attribute)) else 0
        )
        bound: dict[str, Values] = {}
        positional = [a.arg for a in _parameters(function)][skip:]
        for name, arg in zip(positional, call.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            bound[name] = self.resolve(arg, scope, depth)
        if function.args.vararg is not None:
            rest = call.args[len(positional) :]
            bound[function.args.vararg.arg] = frozenset(
                {Tup(tuple(self.resolve(a, scope, depth) for a in rest))}
            )
        for keyword in call.keywords:
            if keyword.arg is not None:
                bound[keyword.arg] = self.resolve(keyword.value, scope, depth)
        for arg in params:
            bound.setdefault(arg.arg, frozenset({(HOLE,)}))
        if message:
            return self._super_message(module, function, bound, depth)
        return self._returns(module, function, bound, depth)

    def _returns(
        self, module: Module, function: ast.FunctionDef, bound: dict[str, Values], depth: int
    ) -> Values:
        key = (id(function), "return")
        if key in self._active:
            return frozenset({(HOLE,)})
        self._active.add(key)
        try:
            inner = Scope(module, function, tuple(bound.items()))
            out: set[Value] = set()
            for node in _walk_function(function):
                if isinstance(node, ast.Return) and node.value is not None:
                    out |= self.resolve(node.value, inner, depth)
            return frozenset(out)
        finally:
            self._active.discard(key)

    def _super_message(
        self, module: Module, function: ast.FunctionDef, bound: dict[str, Values], depth: int
    ) -> Values:
        inner = Scope(module, function, tuple(bound.items()))
        for node in _walk_function(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "__init__"
                and node.args
            ):
                return self.resolve(node.args[0], inner, depth)
        return frozenset({(HOLE,)})
