"""Pass ``lower_repeats``: replace ``Repeat`` in rule bodies by helper rules (plain CFG)."""

from __future__ import annotations

from gramkiln.ir import (
    Bytes,
    CharClass,
    Choice,
    Embed,
    Empty,
    Expr,
    GrammarIR,
    Literal,
    Ref,
    Repeat,
    Rule,
    Seq,
    SpecialToken,
    TokenSet,
    copy_with,
    expr_facts,
    structural_key,
)
from gramkiln.passes._common import (
    NameAllocator,
    is_lexeme_like,
    map_expr,
    rules_inside_lexemes,
    with_subgrammars,
)

STAR_PREFIX = "__star_"
PLUS_PREFIX = "__plus_"
OPTIONAL_CHAIN_PREFIX = "__opt_"
GROUP_PREFIX = "__grp_"
BLOCK_PREFIX = "__blk_"
UP_TO_PREFIX = "__upto_"

# Counts up to this are spelled out (m copies, a chain of n - m optional links); larger ones
# use blocks of 2**i copies, so that `minItems: 10**9` is ~30 rules, not a billion copies.
LINEAR_COUNT_LIMIT = 1024

# Items that may be copied into several places without growing the grammar much.
_SMALL_ITEMS = (Ref, Literal, Bytes, CharClass, TokenSet, SpecialToken, Embed, Empty)


def lower_repeats(grammar: GrammarIR) -> GrammarIR:
    """Rewrite every ``Repeat`` in CFG rules with helper rules; lexemes keep theirs.

    Terminals, lexeme-like (lazy/suffix/stop) rules and the ordinary rules used inside them
    are lexemes that the runtime compiles into one automaton each, so their repeats stay
    (lowering them would also make a lexeme's rules recursive). Everywhere else:

    - ``x?`` becomes ``x | ()`` in place;
    - ``x*`` becomes ``__star_n`` with ``__star_n = __star_n x | ()`` (left recursion: an
      LR or Earley parser handles it in constant stack);
    - ``x+`` becomes ``__plus_n`` with ``__plus_n = __plus_n x | x``;
    - ``x{m,}`` (m >= 2) becomes ``x ... x __star_n`` with m copies of ``x``;
    - ``x{m,n}`` becomes m copies of ``x`` then the k-th link (k = n - m) of a chain of
      ``__opt_*`` helpers ``o_1 = x | ()``, ``o_j = x o_{j-1} | ()``: size linear in n,
      never the exponential or quadratic expansion of all counts, unambiguous when ``x``
      is, and shared by every bounded repeat of the same item;
    - counts past ``LINEAR_COUNT_LIMIT`` (``minItems: 10**9``) use ``__blk_i`` rules of
      ``2**i`` copies instead: ``m`` copies are one block per set bit of ``m``, and
      ``x{0,k}`` is ``__upto_*`` rules of optional blocks (see ``_up_to``), O(log) rules
      either way, unambiguous when ``x`` is.

    An ``x`` that is not a single element and is used more than once is first given its own
    rule ``__grp_n`` so that copies are references. Helpers are shared between identical
    repeats (spans ignored) and named in order of first use. Sub-grammars are lowered too.

    Preserves: the language (helper rules are ordinary rules made of the repeated item, so
    lexeme boundaries and hence ``%ignore`` semantics are unchanged, and a lazy rule's body
    language is unchanged), existing names, options and spans (the replacing node carries
    the span of the ``Repeat``).
    """
    lowerer = _RepeatLowerer(grammar)
    inside_lexemes = rules_inside_lexemes(grammar)
    # Lowering a node depends only on the node (helpers are shared by structure), so one
    # memo serves every rule and shared subtrees are lowered once.
    lowered: dict[int, tuple[Expr, Expr]] = {}
    rules = [
        rule
        if is_lexeme_like(rule)
        or rule.name in inside_lexemes
        or not expr_facts(rule.body).has_repeat  # nothing to lower: skip the walk
        else _with_body(rule, map_expr(rule.body, lowerer.lower, lowered))
        for rule in grammar.rules
    ]
    return grammar.model_copy(
        update={
            "rules": (*rules, *lowerer.helpers),
            "subgrammars": with_subgrammars(grammar, lower_repeats),
        }
    )


def _with_body(rule: Rule, body: Expr) -> Rule:
    """``rule`` with ``body``; the rule itself when the body is unchanged, so that the memos
    of later passes (keyed by identity) still know it."""
    return rule if body is rule.body else copy_with(rule, {"body": body})


class _RepeatLowerer:
    """Builds and shares the helper rules of one grammar."""

    def __init__(self, grammar: GrammarIR) -> None:
        self._names = NameAllocator(rule.name for rule in grammar.rules)
        self._shared: dict[tuple[str, bytes, int], str] = {}
        self.helpers: list[Rule] = []

    def lower(self, node: Expr) -> Expr:
        """Rewrite one node (children already rewritten); non-repeats pass through."""
        if not isinstance(node, Repeat):
            return node
        item, low, high = node.item, node.min, node.max
        span = node.span
        if high == 0:
            return Empty(span=span)
        if (low, high) == (1, 1):
            return item
        if (low, high) == (0, 1):
            return Choice(alternatives=(item, Empty()), span=span)
        if high is None and low <= 1:
            kind = "star" if low == 0 else "plus"
            return Ref(name=self._loop(kind, item), span=span)
        uses = low + (1 if high is None else high - low)
        element = item if uses <= 1 else self._as_element(item)
        items: list[Expr] = (
            [element] * low if low <= LINEAR_COUNT_LIMIT else self._exact_blocks(element, low)
        )
        if high is None:
            items.append(Ref(name=self._loop("star", element)))
        elif high - low > LINEAR_COUNT_LIMIT:
            items.append(Ref(name=self._up_to(element, high - low)))
        elif high > low:
            items.append(Ref(name=self._optional_chain(element, high - low)))
        if len(items) == 1:
            item_only = items[0]
            return copy_with(item_only, {"span": span}) if isinstance(item_only, Ref) else item_only
        return Seq(items=tuple(items), span=span)

    def _as_element(self, item: Expr) -> Expr:
        """``item`` itself when it is small, else a reference to a rule for it."""
        if isinstance(item, _SMALL_ITEMS):
            return item
        return Ref(name=self._helper("group", item, 0, lambda name: item))

    def _loop(self, kind: str, item: Expr) -> str:
        if kind == "star":
            return self._helper(
                "star",
                item,
                0,
                lambda name: Choice(alternatives=(Seq(items=(Ref(name=name), item)), Empty())),
            )
        return self._helper(
            "plus",
            item,
            1,
            lambda name: Choice(alternatives=(Seq(items=(Ref(name=name), item)), item)),
        )

    def _optional_chain(self, item: Expr, length: int) -> str:
        """The rule matching ``item{0,length}``, building the shorter links first."""
        previous: str | None = None
        for link in range(1, length + 1):
            tail = previous

            def body(name: str, tail: str | None = tail) -> Expr:
                head: Expr = item if tail is None else Seq(items=(item, Ref(name=tail)))
                return Choice(alternatives=(head, Empty()))

            previous = self._helper("optional", item, link, body)
        assert previous is not None
        return previous

    def _block(self, item: Expr, power: int) -> str:
        """The rule matching exactly ``2**power`` copies of ``item`` (two halves, recursively)."""
        if power == 0:
            return self._helper("block", item, 0, lambda name: item)
        half = Ref(name=self._block(item, power - 1))
        return self._helper("block", item, power, lambda name: Seq(items=(half, half)))

    def _exact_blocks(self, item: Expr, count: int) -> list[Expr]:
        """``count`` copies of ``item`` as one block per set bit of ``count``, largest first."""
        return [
            Ref(name=self._block(item, power))
            for power in reversed(range(count.bit_length()))
            if count >> power & 1
        ]

    def _up_to(self, item: Expr, count: int) -> str:
        """The rule matching ``item{0,count}`` in O(log count) rules.

        ``item{0, 2**j - 1}`` is ``(B_{j-1} | ()) ... (B_1 | ()) (B_0 | ())`` with ``B_i`` the
        block of ``2**i`` copies: every count has one binary spelling, so the rule is
        unambiguous when ``item`` is, and with the largest block first a parser has at most
        one live start offset per block size (smallest first would keep every subset sum
        alive). Other bounds split at their top bit: ``item{0, 2**j + r}`` is
        ``item{0, 2**j - 1} | B_j item{0, r}`` (the branches count below and from ``2**j``).
        """
        top = count.bit_length() - 1
        if count == (1 << (top + 1)) - 1:
            optional_blocks = tuple(
                Choice(alternatives=(Ref(name=self._block(item, power)), Empty()))
                for power in reversed(range(top + 1))
            )
            return self._helper("upto", item, count, lambda name: Seq(items=optional_blocks))
        below = Ref(name=self._up_to(item, (1 << top) - 1))
        top_block = Ref(name=self._block(item, top))
        rest = count - (1 << top)
        above: Expr = (
            top_block if rest == 0 else Seq(items=(top_block, Ref(name=self._up_to(item, rest))))
        )
        return self._helper("upto", item, count, lambda name: Choice(alternatives=(below, above)))

    def _helper(self, kind: str, item: Expr, count: int, make_body) -> str:  # type: ignore[no-untyped-def]
        key = (kind, structural_key(item), count)
        name = self._shared.get(key)
        if name is None:
            prefix = {
                "star": STAR_PREFIX,
                "plus": PLUS_PREFIX,
                "optional": OPTIONAL_CHAIN_PREFIX,
                "group": GROUP_PREFIX,
                "block": BLOCK_PREFIX,
                "upto": UP_TO_PREFIX,
            }[kind]
            name = self._names.numbered(prefix)
            self._shared[key] = name
            self.helpers.append(Rule(name=name, body=make_body(name)))
        return name
