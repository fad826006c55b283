"""Where whitespace and separators go: compact (``json.dumps``), flexible, or indented."""

from __future__ import annotations

from gramkiln.frontend.json_schema.exprs import char_class, lit, repeat, seq
from gramkiln.frontend.json_schema.options import JsonSchemaOptions
from gramkiln.ir import Expr

JSON_WHITESPACE = char_class([(0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20)])


class Layout:
    """Separator expressions for one set of options; ``depth`` is the container's nesting."""

    def __init__(self, options: JsonSchemaOptions) -> None:
        self.options = options
        self.flexible = options.whitespace == "flexible"
        self.indent_unit = options.indent_unit
        self.ws: Expr = (
            repeat(JSON_WHITESPACE, 0, options.max_whitespace) if self.flexible else lit("")
        )

    @property
    def depth_matters(self) -> bool:
        """Whether expressions differ per nesting depth (only with indentation)."""
        return self.indent_unit is not None and not self.flexible

    def top(self) -> Expr:
        """Around the whole document."""
        return self.ws

    def _newline(self, depth: int) -> Expr:
        assert self.indent_unit is not None
        return lit("\n" + self.indent_unit * depth)

    def open_first(self, depth: int) -> Expr:
        """Between the opening bracket and the first member."""
        if self.flexible:
            return self.ws
        if self.indent_unit is not None:
            return self._newline(depth + 1)
        return lit("")

    def item_separator(self, depth: int) -> Expr:
        """Between two members."""
        if self.flexible:
            return seq(self.ws, lit(","), self.ws)
        if self.indent_unit is not None:
            return seq(lit(self.options.item_separator.rstrip(" ")), self._newline(depth + 1))
        return lit(self.options.item_separator)

    def key_separator(self) -> Expr:
        """Between a key and its value."""
        if self.flexible:
            return seq(self.ws, lit(":"), self.ws)
        return lit(self.options.key_separator)

    def close_nonempty(self, bracket: str, depth: int) -> Expr:
        """After the last member, including the closing bracket."""
        if self.flexible:
            return seq(self.ws, lit(bracket))
        if self.indent_unit is not None:
            return seq(self._newline(depth), lit(bracket))
        return lit(bracket)

    def close_empty(self, bracket: str, depth: int) -> Expr:
        """After the opening bracket of an empty container."""
        if self.flexible:
            return seq(self.ws, lit(bracket))
        return lit(bracket)
