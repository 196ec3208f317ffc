"""Assignments and returns: where a computed value goes.

Owns: `AssignEmitter`, the part of `ExprEmitter` that writes a value to a name, to an entry or
column inside a parallel map, or returns it; sizes of entry-written vectors.
Leaves out: computing the value (exprs.py, calls.py), statement structure (steps.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from toycards.codegen.code import affine
from toycards.codegen.scope import AFTER, Family, family_key, free_names
from toycards.codegen.values import MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir

if TYPE_CHECKING:
    pass


class AssignEmitter:
    """Mixin of ExprEmitter: assignments and returns."""

    def target_ident(self, t: ir.Expr) -> str:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.scope.ns.name(name)

    def target_read(self, t: ir.Expr) -> Val:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.name(name)

    def assign(self, s: ir.Assign, out: list[str]) -> None:
        if not isinstance(s.target, ir.Name):
            raise ToycardsError("element assignments belong inside a parallel map")
        name = s.target.id
        if name in self.scope.dims and not self.scope.vals.get(name):
            v = self.expr(s.value)
            out += self.take_pre()
            if v.code != self.scope.dims[name]:
                out.append(f"{self.scope.dims[name]} = {v.code}")
            return
        v = self.expr(s.value)
        ident = self.scope.ns.name(name)
        out += self.take_pre()
        out.append(f"{ident} = {self.code_layout(v)}")
        self.scope.share(free_names(s.value) | {name})
        self.scope.vals[name] = Val(
            ident, v.rank, py=v.py, windowed=v.windowed, fams=v.fams, boolean=v.boolean
        )

    def assign_in_map(self, s: ir.Assign, out: list[str], maps: dict[str, MapVar]) -> None:
        t = s.target
        v = self.expr(s.value)
        pre = self.take_pre()
        self.scope.share(free_names(s.value))
        if isinstance(t, ir.Name):
            fk = family_key(t.id, set(maps))
            if fk is None or fk[1] not in maps:
                raise ToycardsError(
                    f"inside a parallel map, assign to a family member (e.g. {t.id}_t) or a column"
                )
            key, var = fk
            m = maps[var]
            if m.kind == "pending":
                m.kind = {0: "element", 1: "column"}.get(v.rank, "block")
            base = re.match(r"^[^_^]+", t.id).group(0)
            ident = self.scope.ns.name(base if base not in self.scope.vals else key)
            out += [*pre, f"{ident} = {self.code_layout(v)}"]
            win = v.windowed or (m.windowed and v.rank >= 1)
            self.scope.families[key] = Family(ident, v.rank, var, win, AFTER[m.kind])
            return
        if isinstance(t, ir.Index) and isinstance(t.base, ir.Name):
            name = t.base.id
            idx = t.indices
            fk = family_key(name, set(maps))
            if fk is not None and fk[1] in maps and len(idx) == 2 and isinstance(idx[0], ir.Slice):
                key, var = fk  # `Q̂^h[:, t]`: column t of family member h (a matrix per member)
                if maps[var].kind == "pending":
                    maps[var].kind = "block"
                base = re.match(r"^[^_^]+", name).group(0)
                ident = self.scope.ns.name(base if base not in self.scope.vals else key)
                out += [*pre, f"{ident} = {self.code_layout(v)}"]
                win = v.windowed or any(maps[x].windowed for x in maps if x in v.fams)
                self.scope.families[key] = Family(ident, 2, var, win, AFTER["block"])
                return
            ident = self.scope.ns.name(name)
            if len(idx) == 2 and isinstance(idx[0], ir.Slice):
                out += [*pre, f"{ident} = {self.code_layout(v)}"]
                self.scope.vals[name] = Val(
                    ident,
                    2,
                    windowed=v.windowed or any(maps[x].windowed for x in maps if x in v.fams),
                    fams=v.fams - set(maps),
                )
                return
            if len(idx) == 1:
                self._element_write(name, ident, idx[0], v, pre, out)
                return
        raise ToycardsError("this assignment target cannot be generated")

    def _element_write(
        self, name: str, ident: str, i: ir.Expr, v: Val, pre: list[str], out: list[str]
    ) -> None:
        s = self.scope
        aff = affine(i, set(s.maps))
        if aff is None:
            raise ToycardsError("an element index must be affine in a map variable")
        var, scale, offset = aff
        m = s.maps[var]
        out += pre
        value = v.code
        if name not in s.vals:
            size = self._declared_size(name)
            value = s.ns.fresh(f"{ident}_part")  # computed once, used for the shape and the entries
            out.append(f"{value} = {v.code}")
            out.append(f"{ident} = ops.zeros_for({value}, {size})")
            s.vals[name] = Val(ident, 1, fams=v.fams - {var})
            s.owned.add(name)
        elif name not in s.owned:  # the array may be shared with another name: write a copy
            out.append(f"{ident} = ops.copy({ident})  # {name} gets its own entries (no aliasing)")
            s.owned.add(name)
        out.append(f"{ident}[..., {self.affine_slice(m, scale, offset)}] = {value}")

    def _declared_size(self, name: str) -> str:
        for d in (*self.scope.algo.output_decls, *self.scope.algo.input_decls):
            if name in d.names and isinstance(d.type, ir.TensorType) and len(d.type.dims) == 1:
                return self.dim(d.type.dims[0])
        raise ToycardsError(f"declare {name} as an output vector so that its size is known")

    def ret(self, s: ir.Return, out: list[str]) -> None:
        value = s.value
        if self.scope.is_main:
            if not (isinstance(value, ir.Call) and value.func == "softmax" and len(value.args) == 1):
                raise ToycardsError("a model card returns `P = softmax(Z)`; the module returns the logits Z")
            value = value.args[0]
        v = self.expr(value)
        out += self.take_pre()
        out.append(f"return {self.code_layout(v)}")


# ── helpers ─────────────────────────────────────────────────────────────────────────────
