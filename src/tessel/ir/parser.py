"""Parser of IR text (see printer.py). Errors are TesselParseError with line and column."""

from __future__ import annotations

import binascii
import json
import re
from typing import Any

import numpy as np

from tessel.errors import TesselParseError
from tessel.ir.attrs import AttrKind, ConstData, check_attr
from tessel.ir.builder import canonical_attrs
from tessel.ir.graph import UNKNOWN_LOC, Graph, Node, SourceLoc, Value
from tessel.ir.ops import Op, spec
from tessel.ir.types import DType, Layout, QuantParams, TensorType

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_VALUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
_NUMBER = re.compile(r"-?(inf|nan|\d+(\.\d*)?([eE][-+]?\d+)?)")
_DIMS = re.compile(r"((?:\d+x)*)(" + "|".join(sorted((d.value for d in DType), key=len,
                                                      reverse=True)) + ")")
_OPS = {op.value: op for op in Op}


MAX_INT_DIGITS = 40  # longer integer literals are refused (no IR quantity needs more)


def parse_graph(text: str, source: str = "<text>") -> Graph:
    """Parse one graph (and its resources section) from IR text.

    Raises only TesselParseError (with line and column), whatever the text: the specific checks
    below say what is wrong; anything they miss is still reported at the parser's position.
    """
    if not isinstance(text, str):
        raise TesselParseError(f"IR text must be str, got {type(text).__name__}", 1, 1, source)
    parser = _Parser(text, source)
    try:
        return parser.graph()
    except TesselParseError:
        raise
    except RecursionError:
        raise parser.error("input nested too deeply") from None
    except (ValueError, TypeError, ArithmeticError, KeyError, IndexError, MemoryError) as exc:
        raise parser.error(f"malformed input ({type(exc).__name__}: {str(exc)[:200]})") from None


class _Parser:
    def __init__(self, text: str, source: str):
        self.text, self.source, self.pos = text, source, 0

    # ------------------------------------------------------------ low level
    def error(self, message: str, pos: int | None = None) -> TesselParseError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return TesselParseError(message, line, col, self.source)

    def skip(self) -> None:
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.text.startswith("//", self.pos):
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            found = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected '{s}', found '{found}'")

    def match(self, pattern: re.Pattern, what: str) -> str:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if not m:
            found = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected {what}, found '{found}'")
        self.pos = m.end()
        return m.group(0)

    def ident(self) -> str:
        return self.match(_IDENT, "an identifier")

    def value_name(self) -> str:
        self.expect("%")
        return self.match(_VALUE, "a value name after '%'")

    def string(self) -> str:
        self.skip()
        start = self.pos
        if not self.text.startswith('"', start):
            raise self.error("expected a string")
        end = self.text.find('"', start + 1)
        body = self.text[start + 1:end] if end >= 0 else ""
        if end >= 0 and "\\" not in body and "\n" not in body:  # fast path: no escapes
            self.pos = end + 1
            return body
        m = _STRING.match(self.text, start)
        if not m:
            raise self.error("unterminated string", start)
        self.pos = m.end()
        try:
            return json.loads(m.group(0))
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string literal: {exc.msg}", start) from None

    def number(self) -> int | float:
        start = self.pos
        tok = self.match(_NUMBER, "a number")
        if any(c in tok for c in ".eE") or tok.lstrip("-") in ("inf", "nan"):
            return float(tok)
        if len(tok.lstrip("-")) > MAX_INT_DIGITS:
            raise self.error(f"integer literal of {len(tok)} digits is out of range "
                             f"(at most {MAX_INT_DIGITS})", self._at(start))
        return int(tok)

    def integer(self, what: str) -> int:
        """A number that must be an integer (no fraction, inf or nan)."""
        self.skip()
        start = self.pos
        value = self.number()
        if not isinstance(value, int):
            raise self.error(f"{what} must be an integer, got {value}", start)
        return value

    def _at(self, start: int) -> int:
        """``start`` moved past leading blanks and comments (the token's real position)."""
        saved, self.pos = self.pos, start
        self.skip()
        pos, self.pos = self.pos, saved
        return pos

    # ------------------------------------------------------------ grammar
    def graph(self) -> Graph:
        self.expect("graph")
        self.expect("@")
        name = self.ident()
        self.expect("(")
        inputs: list[Value] = []
        while not self.accept(")"):
            if inputs:
                self.expect(",")
            vname = self.value_name()
            self.expect(":")
            inputs.append(Value(vname, self.tensor_type()))
        self.expect("{")
        nodes: list[Node] = []
        while not self.peek("return"):
            nodes.append(self.node())
        self.expect("return")
        outputs = [self.value_name()]
        while self.accept(","):
            outputs.append(self.value_name())
        self.expect("}")
        resources = self.resources() if self.accept("resources") else {}
        self.skip()
        if self.pos != len(self.text):
            raise self.error("unexpected text after the graph")
        return Graph(name, tuple(inputs), tuple(self._resolve(nodes, resources)), tuple(outputs))

    def node(self) -> Node:
        name = self.value_name()
        self.expect("=")
        self.skip()
        op_pos = self.pos
        op_name = self.ident()
        op = _OPS.get(op_name)
        if op is None:
            raise self.error(f"unknown op '{op_name}'", op_pos)
        self.expect("(")
        inputs: list[str] = []
        while not self.accept(")"):
            if inputs:
                self.expect(",")
            inputs.append(self.value_name())
        attrs = self.attrs(op) if self.peek("{") else {}
        self.expect(":")
        type_ = self.tensor_type()
        loc = self.loc() if self.peek("loc(") else UNKNOWN_LOC
        return Node(name, op, tuple(inputs), canonical_attrs(op, attrs), type_, loc)

    def attrs(self, op: Op) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        while not self.accept("}"):
            if out:
                self.expect(",")
            self.skip()
            key_pos = self.pos
            key = self.ident()
            attr_spec = spec(op).attrs.get(key)
            if attr_spec is None:
                raise self.error(f"op '{op.value}' has no attribute '{key}' "
                                 f"(known: {', '.join(sorted(spec(op).attrs)) or 'none'})", key_pos)
            if key in out:
                raise self.error(f"attribute '{key}' given twice", key_pos)
            self.expect("=")
            out[key] = self.attr_value(attr_spec.kind)
        return out

    def attr_value(self, kind: AttrKind) -> Any:
        self.skip()
        start = self.pos
        if kind is AttrKind.TENSOR:
            return self.tensor_literal()
        if kind in (AttrKind.INTS, AttrKind.FLOATS):
            value: Any = tuple(self.list_of(self.number))
            if kind is AttrKind.FLOATS:
                value = tuple(float(v) for v in value)
        elif kind is AttrKind.STR:
            value = self.string()
        elif kind is AttrKind.BOOL:
            word = self.ident()
            if word not in ("true", "false"):
                raise self.error(f"expected true or false, found '{word}'", start)
            value = word == "true"
        elif kind is AttrKind.DTYPE:
            value = self.enum_word(DType, start)
        elif kind is AttrKind.LAYOUT:
            value = self.enum_word(Layout, start)
        else:
            value = self.number()
            if kind is AttrKind.FLOAT:
                value = float(value)
        err = check_attr(kind, value)
        if err:
            raise self.error(err, start)
        return value

    def enum_word(self, cls: type, start: int) -> Any:
        word = self.ident()
        try:
            return cls(word)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise self.error(f"unknown {cls.__name__} '{word}' (one of: {allowed})", start) from None

    def list_of(self, item) -> list:
        self.expect("[")
        out = []
        while not self.accept("]"):
            if out:
                self.expect(",")
            out.append(item())
        return out

    def tensor_literal(self) -> Any:
        start = self.pos
        if self.accept("dense_resource<"):
            key = self.ident()
            self.expect(">")
            return _ResourceRef(key, start)
        if self.accept("dense_elided<"):
            raise self.error("elided constant: this text was printed with elide_constants and "
                             "cannot be parsed back", start)
        self.expect("dense<")
        values = self.list_of(self.scalar)
        self.expect(">")
        return _InlineTensor(values, start)

    def scalar(self) -> Any:
        if self.peek("true") or self.peek("false"):
            return self.ident() == "true"
        return self.number()

    def tensor_type(self) -> TensorType:
        self.skip()
        start = self.pos
        self.expect("tensor<")
        m = self.match(_DIMS, "dims and dtype like 1x3x224x224xf32")
        dm = _DIMS.fullmatch(m)
        assert dm is not None
        dims = [d for d in dm.group(1).split("x") if d]
        if any(len(d) > MAX_INT_DIGITS for d in dims):
            raise self.error(f"dimension out of range (at most {MAX_INT_DIGITS} digits)", start)
        shape = tuple(int(d) for d in dims)
        dtype = DType(dm.group(2))
        layout, quant = Layout.ANY, None
        while self.accept(","):
            if self.peek("q("):
                quant = self.quant()
            else:
                layout = self.enum_word(Layout, self.pos)
        self.expect(">")
        try:
            return TensorType(shape, dtype, layout, quant)
        except ValueError as exc:
            raise self.error(str(exc), start) from None

    def quant(self) -> QuantParams:
        self.skip()
        start = self.pos
        self.expect("q(")
        if self.peek("["):
            scales = [float(s) for s in self.list_of(self.number)]
            self.expect(",")
            zps = self.list_of(self.number)
            self.expect(",")
            self.expect("axis")
            self.expect("=")
            axis: int | None = self.integer("quantisation axis")
        else:
            scales, axis = [float(self.number())], None
            self.expect(",")
            zps = [self.number()]
        self.expect(")")
        if any(not isinstance(z, int) for z in zps):
            raise self.error("zero points must be integers", start)
        try:
            return QuantParams(tuple(scales), tuple(zps), axis)
        except ValueError as exc:
            raise self.error(str(exc), start) from None

    def loc(self) -> SourceLoc:
        self.expect("loc(")
        module = self.string()
        self.expect("at")
        file = self.string()
        self.expect(":")
        line = self.integer("source line")
        self.expect(")")
        return SourceLoc(module, file, line)

    def resources(self) -> dict[str, tuple[bytes, int]]:
        self.expect("{")
        out: dict[str, tuple[bytes, int]] = {}
        while not self.accept("}"):
            self.skip()
            key_pos = self.pos
            key = self.ident()
            if key in out:
                raise self.error(f"resource '{key}' given twice", key_pos)
            self.expect("=")
            self.skip()
            str_pos = self.pos
            blob = self.string()
            try:
                # strict: the alphabet only, padding only at the end (as b64decode's
                # validate=True, whose regex pass cost 5x the decoding on 62 MB)
                out[key] = (binascii.a2b_base64(blob, strict_mode=True), str_pos)
            except (binascii.Error, ValueError):
                raise self.error(f"resource '{key}' is not valid base64", str_pos) from None
        return out

    def _resolve(self, nodes: list[Node], resources: dict[str, tuple[bytes, int]]) -> list[Node]:
        """Turn inline literals and resource references into ConstData of the declared type."""
        out = []
        for node in nodes:
            value = node.attr("value")
            if isinstance(value, _InlineTensor):
                node = node.replace(attrs={**node.attr_map, "value": self._inline(value, node)})
            elif isinstance(value, _ResourceRef):
                node = node.replace(attrs={**node.attr_map,
                                           "value": self._resource(value, node, resources)})
            out.append(node)
        return out

    def _inline(self, lit: _InlineTensor, node: Node) -> ConstData:
        t = node.type
        if len(lit.values) != t.numel:
            raise self.error(f"constant %{node.name} has {len(lit.values)} values, its type "
                             f"{t} needs {t.numel}", lit.pos)
        np_type = t.dtype.numpy
        if np.issubdtype(np_type, np.integer):
            lo, hi = t.dtype.bounds
            for v in lit.values:
                if isinstance(v, float) or not lo <= v <= hi:
                    raise self.error(f"constant %{node.name}: value {v} is not a "
                                     f"{t.dtype.value} integer [{lo}, {hi}]", lit.pos)
        try:
            return ConstData(np.array(lit.values, dtype=np_type).reshape(t.shape), t.dtype)
        except (OverflowError, ValueError, TypeError) as exc:
            raise self.error(f"constant %{node.name}: values do not fit {t.dtype.value} "
                             f"({exc})", lit.pos) from None

    def _resource(self, ref: _ResourceRef, node: Node, resources: dict) -> ConstData:
        if ref.key not in resources:
            raise self.error(f"resource '{ref.key}' of %{node.name} is not in the resources "
                             "section", ref.pos)
        raw, pos = resources[ref.key]
        t = node.type
        if len(raw) != t.nbytes:
            raise self.error(f"resource '{ref.key}' has {len(raw)} bytes, type {t} needs "
                             f"{t.nbytes}", pos)
        arr = np.frombuffer(raw, dtype=t.dtype.numpy.newbyteorder("<")).astype(t.dtype.numpy,
                                                                      copy=False)  # ConstData copies
        try:
            return ConstData(arr.reshape(t.shape), t.dtype)
        except ValueError as exc:
            raise self.error(f"resource '{ref.key}' of %{node.name}: {exc}", pos) from None


class _ResourceRef:
    def __init__(self, key: str, pos: int):
        self.key, self.pos = key, pos


class _InlineTensor:
    def __init__(self, values: list, pos: int):
        self.values, self.pos = values, pos
