"""The mutants of a Python source file: small, realistic changes made on the syntax tree, applied as text.

Each mutant changes one place, the way a slip of the hand would: a comparison's boundary moved (`<` to `<=`),
`==` and `!=`, `in` and `not in` swapped, a condition negated, `and` and `or` swapped, an arithmetic operator
swapped, a number moved by one, a boolean flipped, `min` and `max` swapped, a returned value replaced by None,
a statement removed (a call such as `out.append(problem)`, an `if` without `else` such as a whole rule, an
augmented assignment). Strings are left alone (messages are not behaviour), as are docstrings and f-strings.
Decorators are left alone (`@dataclass(frozen=True)` is not behaviour a test can see). A line ending in
`# pragma: no mutate` is skipped.

A mutant is applied to the source bytes (`Mutant.apply`), so everything else about the file stays as
written. `scope` names the outermost function the change lies in; a change outside every function (a
module constant, a class body, a default argument, a decorator) has scope None, and needs the module
executed again to take effect.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

NO_MUTATE = "# pragma: no mutate"

_COMPARE_SWAP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}
_ARITH_SWAP = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "*"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
}
_CALL_SWAP = {"min": "max", "max": "min", "any": "all", "all": "any"}
# How each operator token is found between its operands (not as part of a longer operator).
_TOKEN = {
    "<": r"(?<![<>=!])<(?![<=])",
    "<=": r"<=",
    ">": r"(?<![<>=!-])>(?![>=])",
    ">=": r"(?<!>)>=",
    "==": r"==",
    "!=": r"!=",
    "in": r"(?<![\w.])in(?!\w)",
    "not in": r"(?<!\w)not\s+in(?!\w)",
    "is": r"(?<!\w)is(?!\w)(?!\s+not(?!\w))",
    "is not": r"(?<!\w)is\s+not(?!\w)",
    "+": r"(?<![+=])\+(?![+=])",
    "-": r"(?<![-=])-(?![-=>])",
    "*": r"(?<!\*)\*(?![*=])",
    "/": r"(?<!/)/(?![/=])",
    "//": r"//(?!=)",
    "%": r"%(?!=)",
    "**": r"\*\*(?!=)",
    "and": r"(?<!\w)and(?!\w)",
    "or": r"(?<!\w)or(?!\w)",
    "+=": r"\+=",
    "-=": r"-=",
    "*=": r"\*=",
    "/=": r"/=",
}
_AUG_SWAP = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+="), ast.Mult: ("*=", "/="), ast.Div: ("/=", "*=")}
_NEEDS_PARENS = (ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.UnaryOp, ast.BinOp)


@dataclass(frozen=True)
class Mutant:
    """One change to one file: bytes `start:end` of the source replaced by `after`."""

    path: str
    line: int
    operator: str
    before: str
    after: str
    start: int
    end: int
    scope: str | None

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.start}:{self.operator}:{self.after}"

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.operator}: {self.before!r} -> {self.after!r}"

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.after.encode() + source[self.end :]


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, source: bytes) -> None:
        self.path, self.source = path, source
        self.line_starts = [0]
        for i, byte in enumerate(source):
            if byte == 0x0A:
                self.line_starts.append(i + 1)
        self.skip_lines = {
            n for n, text in enumerate(source.decode().splitlines(), start=1) if text.rstrip().endswith(NO_MUTATE)
        }
        self.names: list[str] = []
        self.scope: str | None = None
        self.out: list[Mutant] = []

    # --- positions -------------------------------------------------------------------------------
    def _offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def _span(self, node: ast.AST) -> tuple[int, int]:
        start = self._offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self._offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def _text(self, start: int, end: int) -> str:
        return self.source[start:end].decode()

    def _add(self, line: int, operator: str, start: int, end: int, after: str) -> None:
        if line in self.skip_lines:
            return
        before = self._text(start, end)
        self.out.append(Mutant(self.path, line, operator, before, after, start, end, self.scope))

    def _swap_token(self, left: ast.AST, right: ast.AST, token: str, after: str, operator: str) -> None:
        """Replace the operator token that lies between two operand nodes."""
        gap_start, gap_end = self._span(left)[1], self._span(right)[0]
        gap = self._text(gap_start, gap_end)
        code = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), gap)
        matches = list(re.finditer(_TOKEN[token], code))
        if len(matches) != 1:
            return
        start = gap_start + len(gap[: matches[0].start()].encode())
        end = gap_start + len(gap[: matches[0].end()].encode())
        self._add(right.lineno, operator, start, end, after)  # type: ignore[attr-defined]

    # --- scopes ----------------------------------------------------------------------------------
    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.visit(node.args)  # defaults are evaluated when the def runs: the enclosing scope
        outer = self.scope
        self.names.append(node.name)
        if outer is None:
            self.scope = ".".join(self.names)
        body = node.body[1:] if _docstring(node) else node.body
        for statement in body:
            self.visit(statement)
        self.names.pop()
        self.scope = outer

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.names.append(node.name)
        for statement in node.body[1:] if _docstring(node) else node.body:
            self.visit(statement)
        self.names.pop()

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body[1:] if _docstring(node) else node.body:
            if _is_type_checking(statement) or _is_dunder_all(statement):
                continue
            self.visit(statement)

    def visit_arguments(self, node: ast.arguments) -> None:
        for default in [*node.defaults, *[d for d in node.kw_defaults if d is not None]]:
            self.visit(default)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # f-strings: messages (and their positions are unreliable before Python 3.12)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        if isinstance(node.annotation, ast.Subscript):  # Annotated[int, Field(ge=1)] carries bounds
            self.visit(node.annotation)

    # --- operators -------------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            token, after = _COMPARE_SWAP[type(op)]
            self._swap_token(operands[i], operands[i + 1], token, after, "compare")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = _ARITH_SWAP.get(type(node.op))
        textual = any(isinstance(n, ast.JoinedStr | ast.List | ast.Tuple) for n in (node.left, node.right)) or any(
            isinstance(n, ast.Constant) and isinstance(n.value, str | bytes) for n in (node.left, node.right)
        )
        if swap and not textual:
            self._swap_token(node.left, node.right, swap[0], swap[1], "arithmetic")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        swap = _AUG_SWAP.get(type(node.op))
        if swap and not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self._swap_token(node.target, node.value, swap[0], swap[1], "arithmetic")
        if self.scope is not None:
            self._remove(node)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        token, after = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for left, right in zip(node.values, node.values[1:], strict=False):
            self._swap_token(left, right, token, after, "boolean")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            start, end = self._span(node)
            inner_start, inner_end = self._span(node.operand)
            self._add(node.lineno, "negate", start, end, f"({self._text(inner_start, inner_end)})")
        self.generic_visit(node)

    def _negate(self, test: ast.expr) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return  # removing the `not` is the mutant already
        start, end = self._span(test)
        self._add(test.lineno, "negate", start, end, f"not ({self._text(start, end)})")

    def visit_If(self, node: ast.If) -> None:
        self._negate(node.test)
        if self.scope is not None and not node.orelse:
            self._remove(node)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for condition in node.ifs:
            self._negate(condition)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        start, end = self._span(node)
        if isinstance(value, bool):
            self._add(node.lineno, "constant", start, end, str(not value))
        elif isinstance(value, int):
            self._add(node.lineno, "constant", start, end, str(value + 1))
        elif isinstance(value, float):
            self._add(node.lineno, "constant", start, end, repr(value + 1))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in _CALL_SWAP:
            start, end = self._span(node.func)
            self._add(node.lineno, "call", start, end, _CALL_SWAP[node.func.id])
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            start, end = self._span(node.value)
            self._add(node.lineno, "return", start, end, "None")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if self.scope is not None and isinstance(node.value, ast.Call | ast.Await):
            self._remove(node)
        self.generic_visit(node)

    def _remove(self, node: ast.stmt) -> None:
        start, end = self._span(node)
        self._add(node.lineno, "remove", start, end, "pass")


def _docstring(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = node.body[0] if node.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _is_dunder_all(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _called_on_import(tree: ast.Module) -> set[str]:
    """The module's functions that run while it is imported: called outside every function body (a module
    constant, a class body such as `model_config = rules(cel(...))`, an `Annotated[...]` argument), or by such a
    function. Swapping the code of one of them changes nothing already built; the module must run again."""
    defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}

    def calls(node: ast.AST, *, into_bodies: bool) -> set[str]:
        found: set[str] = set()
        stack: list[ast.AST] = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, ast.Call) and isinstance(current.func, ast.Name):
                found.add(current.func.id)
            if not into_bodies and isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                stack += [*getattr(current, "decorator_list", []), current.args]
                continue
            stack += list(ast.iter_child_nodes(current))
        return found

    todo = [name for name in calls(tree, into_bodies=False) if name in defs]
    called: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in called:
            called.add(name)
            todo += [n for n in calls(defs[name], into_bodies=True) if n in defs and n != name]
    return called


def mutants_of(path: str, source: bytes) -> Iterator[Mutant]:
    """Every mutant of one file, in source order; each compiles (the ones that would not are dropped)."""
    finder = _Finder(path, source)
    tree = ast.parse(source, filename=path)
    finder.visit(tree)
    on_import = _called_on_import(tree)
    seen: set[str] = set()
    for found in sorted(finder.out, key=lambda m: (m.start, m.operator, m.after)):
        mutant = found
        if found.scope is not None and found.scope.split(".")[0] in on_import:
            mutant = replace(found, scope=None)
        if mutant.key in seen:
            continue
        seen.add(mutant.key)
        try:
            compile(mutant.apply(source), path, "exec", dont_inherit=True)
        except SyntaxError:
            continue
        yield mutant
