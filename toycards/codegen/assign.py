"""Assignments and returns: where a computed value goes.

Owns: `AssignEmitter`, the part of `ExprEmitter` that writes a value to a name, to an entry or
column inside a parallel map, to a column outside one (`Y[:, t] ← …` in a sequential loop), or
returns it; sizes of entry-written vectors.
Leaves out: computing the value (exprs.py, calls.py), statement structure (steps.py).
"""

from __future__ import annotations

import re

from toycards.codegen.axes import COL, ONE, ROW, as_grid, canonical, rename_axes, spell
from toycards.codegen.code import affine, expr_text, paren
from toycards.codegen.module import comment_safe
from toycards.codegen.scope import AFTER, Family, family_key, free_names
from toycards.codegen.values import MapVar, Val
from toycards.errors import ToycardsError
from toycards.lang import ir
from toycards.lang.outputs import returns_distribution


class AssignEmitter:
    """Mixin of ExprEmitter: assignments and returns."""

    def target_ident(self, t: ir.Expr) -> str:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.scope.ns.name(name)

    def target_read(self, t: ir.Expr) -> Val:
        name = t.base.id if isinstance(t, ir.Index) else t.id
        return self.name(name)

    def assign(self, s: ir.Assign, out: list[str]) -> None:
        t = s.target
        if isinstance(t, ir.Index) and isinstance(t.base, ir.Name) and len(t.indices) in (1, 2):
            if not any(isinstance(i, ir.Slice) for i in t.indices):  # `y[1] ← …`, `S[i, j] ← …`
                v = self.expr(s.value)
                out += self.take_pre()
                self.scope.share(free_names(s.value))
                self.entry_write(t, v, out)
                return
        if isinstance(t, ir.Index) and isinstance(t.base, ir.Name) and column_target(t):
            return self.column_write(s, t, out)
        if not isinstance(s.target, ir.Name):
            raise ToycardsError("this assignment target cannot be generated")
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
        self.scope.columns.pop(name, None)  # a whole value now: its column writes go into this one
        made = isinstance(s.value, ir.Call) and s.value.func in ("zeros", "filled")
        made = made and self.em.resolve(self.scope.algo, s.value.func) is None  # the builtin's
        (self.scope.unbatched.add if made else self.scope.unbatched.discard)(name)
        self.scope.share(free_names(s.value) | {name})
        self.scope.vals[name] = Val(ident, v.rank, py=v.py, fams=v.fams, boolean=v.boolean, row=v.row)

    def column_write(self, s: ir.Assign, t: ir.Index, out: list[str]) -> None:
        """`Y[:, t] ← v` outside a parallel map (t a number, a hyperparameter or a sequential loop's
        index): column t of Y, which the first such write makes (zeros of Y's declared size)."""
        name, index = t.base.id, t.indices[1]
        if free_names(index) & set(self.scope.maps):
            self.refuse(index, "a column written by a map variable inside a map", "")
        v = self.expr(s.value)
        if v.rank != 1 or v.row:
            self.refuse(s.value, f"column {expr_text(index)} of {name} needs a vector", "")
        size = ""
        made_here = name in self.scope.columns  # made by a loop's first turn, then written in place
        if name not in self.scope.vals or made_here:  # zeros of its declared number of columns
            declared = self.scope.decl_types.get(name) or next(
                (d.type for d in self.scope.algo.output_decls if name in d.names), None
            )
            if not (isinstance(declared, ir.TensorType) and len(declared.dims) == 2):
                self.refuse(
                    t.base,
                    f"the number of columns of {name} is not known",
                    f"declare {name} under Output with its shape, or give it a value first ({name} ← …)",
                )
            size = f", {self.dim(declared.dims[1])}"
        out += self.take_pre()
        self.scope.share(free_names(s.value))
        ident = self.scope.ns.name(name)
        k = paren(self.int_code(index))
        pick = str(int(k) - 1) if k.isdigit() else f"{k} - 1"
        if made_here:
            current = self.scope.columns[name]
        elif name not in self.scope.vals:
            current = "None"
        else:
            current = self.scope.vals[name].code
            if name not in self.scope.owned:  # the array may be shared with another name: write a copy
                out.append(f"{ident} = ops.copy({current})  # {comment_safe(name)} gets its own columns")
                current = ident
        out.append(f"{ident} = ops.put_col({current}, {pick}, {v.code}{size})")
        self.scope.vals[name] = Val(ident, 2)
        self.scope.owned.add(name)

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
            code = self.each_iteration(v, [var])  # `c_i ← 1`: the same member n times, an axis of n
            out += [*pre, f"{ident} = {self._stored(v, [var], {}, {var: AFTER[m.kind]}, code)}"]
            self.scope.families[key] = Family(ident, v.rank, var, AFTER[m.kind])
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
                columns = [i.id for i in idx[1:] if isinstance(i, ir.Name) and i.id in maps]
                code = self.each_iteration(v, [var, *columns])
                code = self._stored(
                    v, [var, *columns], {c: COL for c in columns}, {var: AFTER["block"]}, code
                )
                out += [*pre, f"{ident} = {code}"]
                self.scope.families[key] = Family(ident, 2, var, AFTER["block"])
                return
            ident = self.scope.ns.name(name)
            if len(idx) == 2 and isinstance(idx[0], ir.Slice):
                columns = [i.id for i in idx[1:] if isinstance(i, ir.Name) and i.id in maps]
                code = self.each_iteration(v, columns)  # β leaving out j: n copies
                if columns:
                    rest = self.after_of(v.fams - set(maps))
                    code = self._stored(v, columns, {c: COL for c in columns}, rest, code)
                out += [*pre, f"{ident} = {code}"]
                self.scope.vals[name] = Val(ident, 2, fams=v.fams - set(maps))
                return
            if len(idx) in (1, 2) and not any(isinstance(i, ir.Slice) for i in idx):
                out += pre
                self.entry_write(t, v, out)
                return
        raise ToycardsError("this assignment target cannot be generated")

    def _stored(self, v: Val, variables: list[str], renamed: dict, after: dict, code: str) -> str:
        """The code of `v` written for every value of the map's `variables` (`each_iteration`), laid
        out as it is stored: the axes of a column index `renamed` the columns' axis, each
        variable that indexes the stored family at its place `after`, whatever place the map
        gave it while it ran."""
        have = canonical(v.rank, False, self.after_of(v.fams | set(variables)))
        have = rename_axes(have, renamed)
        rank = v.rank + (1 if renamed else 0)
        return spell(code, have, canonical(rank, False, after))

    def written(self, t: ir.Expr, v: Val) -> str:
        """`v`'s code laid out as the array that target `t` holds (a guarded write in a map,
        `ops.where` against the array's old entries): an entry `y[i]`'s variable names the
        vector's entries, a column `Y[:, t]`'s the matrix's columns, `S[i, t]`'s both; any other
        target (a family member) holds the map's own layout."""
        maps = self.scope.maps
        if v.py or not isinstance(t, ir.Index):
            return v.code
        var = [i.id if isinstance(i, ir.Name) and i.id in maps else None for i in t.indices]
        if len(var) == 1 and var[0]:
            rename, want = {var[0]: ROW}, (ROW,)
        elif len(var) == 2 and isinstance(t.indices[0], ir.Slice) and var[1]:
            rename, want = {var[1]: COL}, (COL, ROW)
        elif len(var) == 2 and all(var):
            rename, want = {var[0]: ROW, var[1]: COL}, (COL, ROW)
        else:
            return v.code
        have = rename_axes(self.axes(v), rename)
        return spell(v.code, have, want, batched=not self.unbatched(v))

    def entry_write(self, t: ir.Index, v: Val, out: list[str]) -> None:
        """`y[i] ← v`, `S[t_z, t_x] ← v`, `y[1] ← v`: entries of a vector or a matrix, written into
        the array's own storage. A new array gets its declared (Output) size, or the map's range
        for an index that is a map variable; an array shared with another name is copied first."""
        s, name = self.scope, t.base.id
        ident = s.ns.name(name)
        entries = [self._entry_slice(i) for i in t.indices]
        if len(entries) == 2:  # a code-layout matrix is […, columns, rows]
            entries.reverse()
            value = self._grid_value(v, entries)
        else:
            value = self._vector_value(v, entries[0][1])
        where = ", ".join(sl for sl, _, _ in entries)
        if name not in s.vals:
            sizes = self._new_sizes(name, entries)
            ranges = [s.maps[var].bound_code if full else None for _, var, full in entries]
            if sizes == ranges and {var for _, var, _ in entries} <= v.fams:
                out.append(f"{ident} = {value}")  # every entry, each from its own value
            else:
                part = s.ns.fresh(f"{ident}_part")  # computed once, used for the shape and the entries
                zeros = (
                    f"ops.zeros_for({part}, {sizes[0]})"
                    if len(sizes) == 1
                    else (f"ops.zeros_grid({part}, {sizes[0]}, {sizes[1]})")
                )
                out += [f"{part} = {value}", f"{ident} = {zeros}", f"{ident}[..., {where}] = {part}"]
            s.vals[name] = Val(ident, len(entries), fams=v.fams - set(s.maps))
            s.owned.add(name)
            return
        if name not in s.owned:  # the array may be shared with another name: write a copy
            out.append(
                f"{ident} = ops.copy({ident})  # {comment_safe(name)} gets its own entries (no aliasing)"
            )
            s.owned.add(name)
        if not v.py and name in s.unbatched:  # made without batch axes (`zeros(m, n)`): the value's
            part = s.ns.fresh(f"{ident}_part")
            out += [f"{part} = {value}", f"{ident} = ops.widen({ident}, {part}, {len(entries)})"]
            value = part
        out.append(f"{ident}[..., {where}] = {value}")

    def _entry_slice(self, i: ir.Expr) -> tuple[str, str | None, bool]:
        """(slice of the entries index i writes, its map variable, whether it is the variable
        itself: then the entries are 1 … its range, in order)."""
        s = self.scope
        aff = affine(i, set(s.maps))
        if aff is not None:
            var, scale, offset = aff
            return self.affine_slice(s.maps[var], scale, offset), var, scale == 1 and offset is None
        if free_names(i) & set(s.maps):
            self.refuse(i, f"the entry index {expr_text(i)} cannot be generated", "write it as a·i + b")
        k = paren(self.int_code(i))
        return (f"{int(k) - 1}:{k}" if k.isdigit() else f"{k} - 1:{k}"), None, False

    def _grid_value(self, v: Val, entries: list[tuple[str, str | None, bool]]) -> str:
        """The value of matrix entries laid out […, columns, rows] like the entries it fills. Its
        map variables' axes sit where their kinds put them (scope.AFTER): a number per (g, t) of a
        call on `B[(g − 1)·m + 1 : g·m, t]` is […, n_g, ℓ, 1], g a block variable, not […, ℓ, n_g]."""
        (_, col, _), (_, row, _) = entries
        if v.py:
            return v.code
        if v.rank == 0:  # the grid's axes named, a size-1 axis for a variable it does not vary with
            grid = (col if col in v.fams else ONE, row if row in v.fams else ONE)
            return spell(v.code, self.axes(v), grid)
        maps = self.scope.maps
        after = {x: AFTER[maps[x].kind] for x in (row, col) if x in v.fams and x in maps}
        if after.get(row, 0) != 0 or after.get(col, 1) != 1:
            return as_grid(v.code, after.get(row), after.get(col))
        if col is not None and col in v.fams:
            return v.code
        return f"{paren(v.code)}[..., None, :]"  # […, rows] or an array scalar […, 1]: one column

    def _vector_value(self, v: Val, var: str | None) -> str:
        """The value of vector entries `z[g]`, g a map variable whose axis is laid out for a column
        or a block (a number per g is […, n, 1] or […, n, 1, 1]): laid out […, n]."""
        m = self.scope.maps.get(var) if var is not None and var in v.fams and not v.py else None
        if m is None:
            return v.code
        return spell(v.code, self.axes(v), (var,) if v.rank == 0 else (var, ROW))

    def _new_sizes(self, name: str, entries: list[tuple[str, str | None, bool]]) -> list[str]:
        """Code-order sizes of an array defined by its entries: its Output type, else the ranges."""
        declared = self.scope.decl_types.get(name) or next(
            (d.type for d in self.scope.algo.output_decls if name in d.names), None
        )
        if isinstance(declared, ir.TensorType) and len(declared.dims) == len(entries):
            return [self.dim(d) for d in reversed(declared.dims)]
        if all(full for _, _, full in entries):
            return [self.scope.maps[var].bound_code for _, var, _ in entries]
        raise ToycardsError(f"declare {name} as the Output so that its size is known")

    def ret(self, s: ir.Return, out: list[str]) -> None:
        value = s.value
        if self.scope.is_main and returns_distribution(self.scope.algo):
            if not (isinstance(value, ir.Call) and value.func == "softmax" and len(value.args) == 1):
                raise ToycardsError("a model card returns `P = softmax(Z)`; the module returns the logits Z")
            value = value.args[0]
        v = self.expr(value)
        out += self.take_pre()
        out.append(f"return {self.code_layout(v)}")


# ── helpers ─────────────────────────────────────────────────────────────────────────────


def column_target(t: ir.Index) -> bool:
    """`Y[:, t]`: a whole column picked by one index."""
    i = t.indices
    whole = len(i) == 2 and isinstance(i[0], ir.Slice) and i[0].lo is None and i[0].hi is None
    return whole and not isinstance(i[1], ir.Slice)
