"""The training corpus of the C++ core's build profile (see train.py beside this file).

Grammars of every front end, each with texts to decode, chosen to run the code a user's
grammar runs: compiling against a real vocabulary, loading, the prewarm, fills that hit the
caches and fills that compute, commits, rollback, forks, batch fills, refused tokens. None of
them is a benchmark workload or shares its texts (bench/grammars, bench/instances and the
MaskBench sample are left out on purpose): a profile trained on what it is then measured on
would flatter the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainingGrammar:
    """One grammar in one front end's source form, with texts it accepts."""

    name: str
    front_end: str  # lark, ebnf, json_schema, regex, glrm
    source: Any
    texts: tuple[str, ...] = field(default_factory=tuple)
    options: Any = None  # the front end's options (JSON Schema only)


LISP = r"""
start: sexpr+
?sexpr: atom | list | quoted
list: "(" sexpr* ")" | "[" sexpr* "]"
quoted: "'" sexpr
?atom: SYMBOL | NUMBER | STRING | "#t" | "#f"
SYMBOL: /[a-zA-Z_+\-*\/<>=!?][a-zA-Z0-9_+\-*\/<>=!?]*/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
STRING: /"([^"\\]|\\.)*"/
%import common.WS
%ignore WS
"""

LISP_TEXTS = (
    "(define (fact n)\n  (if (<= n 1)\n      1\n      (* n (fact (- n 1)))))\n(display (fact 10))",
    "(let loop ((i 0) (acc '()))\n  (if (= i 5) (reverse acc)\n      (loop (+ i 1) (cons (* i i) acc))))",
    '(map (lambda (x) (list x "item" [x 2.5])) (quote (a b (c (d (e f))))))',
)

SCRIPT = r"""
start: statement*
?statement: declaration | function | return_stmt | if_stmt | for_stmt | expr_stmt | block
declaration: ("let" | "const" | "var") NAME "=" expr ";"
function: "function" NAME "(" [NAME ("," NAME)*] ")" block
return_stmt: "return" expr? ";"
if_stmt: "if" "(" expr ")" statement ("else" statement)?
for_stmt: "for" "(" declaration expr ";" expr ")" statement
expr_stmt: expr ";"
block: "{" statement* "}"
?expr: assignment
?assignment: ternary | target "=" assignment | target "+=" assignment
?target: NAME | member
?ternary: logic_or ("?" expr ":" expr)?
?logic_or: logic_and ("||" logic_and)*
?logic_and: comparison ("&&" comparison)*
?comparison: additive (("===" | "!==" | "<" | ">" | "<=" | ">=") additive)*
?additive: multiplicative (("+" | "-") multiplicative)*
?multiplicative: unary (("*" | "/" | "%") unary)*
?unary: ("!" | "-") unary | call
?call: primary | call "(" [expr ("," expr)*] ")" | member | call "[" expr "]"
member: call "." NAME
?primary: NAME | NUMBER | STRING | "true" | "false" | "null" | array | object | "(" expr ")"
        | arrow
arrow: "(" [NAME ("," NAME)*] ")" "=>" (expr | block)
array: "[" [expr ("," expr)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: (NAME | STRING) ":" expr
NAME: /[A-Za-z_$][A-Za-z0-9_$]*/
NUMBER: /[0-9]+(\.[0-9]+)?/
STRING: /'[^'\n]*'/ | /"[^"\n]*"/
%import common.WS
%ignore WS
"""

SCRIPT_TEXTS = (
    "function total(items, rate) {\n  let sum = 0;\n"
    "  for (let i = 0; i < items.length; i += 1) {\n"
    "    if (items[i].price > 0 && !items[i].skip) { sum += items[i].price * (1 + rate); }\n"
    "    else { sum = sum - 1; }\n  }\n  return sum;\n}\n",
    "const config = { name: 'demo', sizes: [1, 2, 3], nested: { on: true, ratio: 0.5 } };\n"
    "const pick = (a, b) => a.size >= b.size ? a : b;\n"
    "console.log(pick(config.sizes[0], config.nested.ratio), config.name);\n",
    "var x = (a + b) * (c - d) / (e % f);\nif (x === null || x !== x) return;\n"
    "result = fn(g(h(1, 2), k[3]), [4, [5, [6]]], {deep: {deeper: {deepest: 7}}});\n",
)

SQL = r"""
start: select (";" select)* ";"?
select: "SELECT"i columns "FROM"i tables where? group? order? limit?
columns: "*" | column ("," column)*
column: expr ("AS"i NAME)?
tables: table ("," table | join)*
table: NAME ("AS"i? NAME)?
join: ("LEFT"i | "INNER"i)? "JOIN"i table "ON"i condition
where: "WHERE"i condition
group: "GROUP"i "BY"i expr ("," expr)*
order: "ORDER"i "BY"i expr ("ASC"i | "DESC"i)? ("," expr ("ASC"i | "DESC"i)?)*
limit: "LIMIT"i INT
?condition: disjunct ("OR"i disjunct)*
?disjunct: atom_cond ("AND"i atom_cond)*
?atom_cond: expr COMPARE expr | expr "IN"i "(" expr ("," expr)* ")" | "NOT"i atom_cond
          | "(" condition ")" | expr "IS"i "NOT"i? "NULL"i
?expr: term (("+" | "-") term)*
?term: value (("*" | "/") value)*
?value: NAME ("." NAME)? | INT | STRING | NAME "(" (expr ("," expr)* | "*")? ")" | "(" expr ")"
COMPARE: "=" | "<>" | "!=" | "<" | ">" | "<=" | ">="
NAME: /[a-z_][a-z0-9_]*/
STRING: /'[^']*'/
%import common.INT
%import common.WS
%ignore WS
"""

SQL_TEXTS = (
    "SELECT u.name, count(*) AS orders FROM users u JOIN orders o ON o.user_id = u.id\n"
    "WHERE u.active = 1 AND (o.total > 100 OR o.status IN ('new', 'paid'))\n"
    "GROUP BY u.name ORDER BY orders DESC LIMIT 10;",
    "select * from logs where level <> 'debug' and not (source is null) order by ts",
)

CONFIG = r"""
start: (section | pair | _NL)*
section: "[" NAME ("." NAME)* "]" _NL
pair: NAME "=" value _NL
?value: STRING | NUMBER | "true" | "false" | array | inline
array: "[" [value ("," value)*] "]"
inline: "{" [NAME "=" value ("," NAME "=" value)*] "}"
NAME: /[A-Za-z_][A-Za-z0-9_-]*/
STRING: /"[^"\n]*"/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
_NL: /(\r?\n[ \t]*)+/
%ignore /[ \t]+/
%ignore /#[^\n]*/
"""

CONFIG_TEXTS = (
    '[server]\nhost = "0.0.0.0"\nport = 8080\n# comment\n[server.tls]\nenabled = true\n'
    'ciphers = ["a", "b", "c"]\nlimits = { rate = 10, burst = 20.5 }\n',
)

PROSE = r"""
start: block+
?block: heading | item | para
heading: /#{1,6} [^\n]+\n/
item: /[-*] [^\n]+\n/
para: LINE+ "\n"?
LINE: /[^#\-*\n][^\n]*\n/
"""

PROSE_TEXTS = (
    "# Release notes\n- faster masks\n- fewer copies\nThe runtime now keeps its caches warm.\n"
    "It was measured twice.\n\n## Details\n* one\n* two\n",
)

AMBIGUOUS = r"""
start: e
e: e "+" e | e "*" e | "(" e ")" | NUMBER | e "?" e ":" e
%import common.NUMBER
%import common.WS
%ignore WS
"""

AMBIGUOUS_TEXTS = ("1 + 2 * 3 + (4 * 5 + 6) * 7 ? 8 : 9 + 10 * (11 + 12)",)

CALLS = r"""
start: (TEXT | call)*
call: "<call name=\"" NAME "\">" object "</call>"
object: "{" [member ("," member)*] "}"
member: ESCAPED_STRING ":" value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
NAME: /[a-z_]+/
TEXT: /[^<]+/
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""

CALLS_TEXTS = (
    'Let me look that up. <call name="search">{"query": "weather in Oslo", "limit": 3}</call>'
    ' Then <call name="convert">{"from": "C", "to": "F", "values": [1.5, -2, {"x": null}]}'
    "</call> done.",
)

EBNF_ARITH = r"""
root ::= expr
expr ::= term (ws ("+" | "-") ws term)*
term ::= factor (ws ("*" | "/") ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
ws ::= [ ]*
"""

EBNF_LIST = r"""
root ::= "[" ws (item ("," ws item)*)? ws "]"
item ::= "\"" [a-z ]* "\"" | [0-9]+ | root
ws ::= [ \n]*
"""

SCHEMA_ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 40},
                "email": {"type": "string", "format": "email"},
                "tier": {"enum": ["free", "pro", "enterprise"]},
            },
            "required": ["name", "tier"],
            "additionalProperties": False,
        },
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                    "price": {"type": "number"},
                },
                "required": ["sku", "qty"],
            },
            "minItems": 1,
        },
        "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "placed": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "customer", "lines"],
}

SCHEMA_ORDER_TEXTS = (
    '{"id": 42, "customer": {"name": "Ada", "email": "ada@example.org", "tier": "pro"}, '
    '"lines": [{"sku": "ABC-1234", "qty": 2, "price": 9.5}, {"sku": "XYZ-0001", "qty": 1}], '
    '"notes": null, "placed": "2026-01-02T03:04:05Z"}',
    '{"id": 7, "customer": {"name": "B", "tier": "free"}, "lines": [{"sku": "QQQ-9999", '
    '"qty": 99}]}',
)

SCHEMA_EVENTS = {
    "type": "array",
    "items": {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "click"},
                    "x": {"type": "number"},
                    "y": {"type": "number"},
                },
                "required": ["kind", "x", "y"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "key"},
                    "key": {"type": "string", "maxLength": 8},
                    "mods": {"type": "array", "items": {"enum": ["ctrl", "alt", "shift"]}},
                },
                "required": ["kind", "key"],
                "additionalProperties": False,
            },
        ]
    },
}

SCHEMA_EVENTS_TEXTS = (
    '[{"kind": "click", "x": 10.5, "y": -3}, {"kind": "key", "key": "Enter", "mods": '
    '["ctrl", "shift"]}, {"kind": "click", "x": 0, "y": 1e3}]',
)

SCHEMA_TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "weight": {"type": "number", "minimum": 0},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["label"],
        }
    },
    "$ref": "#/$defs/node",
}

SCHEMA_TREE_TEXTS = (
    '{"label": "root", "children": [{"label": "a", "weight": 1.25, "children": [{"label": '
    '"a1"}, {"label": "a2", "children": [{"label": "deep", "children": []}]}]}, '
    '{"label": "b"}]}',
)

SCHEMA_ANY = {"type": "object", "additionalProperties": True}

SCHEMA_ANY_TEXTS = (
    '{"free": [1, "two", {"three": [3.0, null, true]}], "x": {"y": {"z": {"w": []}}}}',
)

CORPUS: tuple[TrainingGrammar, ...] = (
    TrainingGrammar("lisp", "lark", LISP, LISP_TEXTS),
    TrainingGrammar("script", "lark", SCRIPT, SCRIPT_TEXTS),
    TrainingGrammar("sql", "lark", SQL, SQL_TEXTS),
    TrainingGrammar("config", "lark", CONFIG, CONFIG_TEXTS),
    TrainingGrammar("prose", "lark", PROSE, PROSE_TEXTS),
    TrainingGrammar("ambiguous", "lark", AMBIGUOUS, AMBIGUOUS_TEXTS),
    TrainingGrammar("calls", "lark", CALLS, CALLS_TEXTS),
    TrainingGrammar("arith", "ebnf", EBNF_ARITH, ("(1.5 + 2) * -3 / (4 - (5 * 6))",)),
    TrainingGrammar("nested list", "ebnf", EBNF_LIST, ('["a b", 12, [3, ["x", [4]]], "z"]',)),
    TrainingGrammar("order", "json_schema", SCHEMA_ORDER, SCHEMA_ORDER_TEXTS),
    TrainingGrammar(
        "events",
        "json_schema",
        SCHEMA_EVENTS,
        SCHEMA_EVENTS_TEXTS + ('[{"kind":"key","key":"a"},\n  {"kind" : "click","x":1,"y":2}]',),
        {"whitespace": "flexible"},
    ),
    TrainingGrammar("tree", "json_schema", SCHEMA_TREE, SCHEMA_TREE_TEXTS),
    TrainingGrammar("any object", "json_schema", SCHEMA_ANY, SCHEMA_ANY_TEXTS),
    TrainingGrammar(
        "date",
        "regex",
        r"[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]( [0-2][0-9]:[0-5][0-9])?",
        ("2026-12-05 07:30",),
    ),
    TrainingGrammar("words", "regex", r"([A-Za-z]+[,.]? )*[A-Za-z]+\.", ("Hello there, world.",)),
)
