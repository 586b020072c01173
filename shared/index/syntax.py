"""The definitions in a source file — functions, methods, classes, types — with their lines.

Chunking follows them so a chunk holds whole definitions and carries their names. Python is
read with its own parser (``ast``); Java, JavaScript, TypeScript, Go, C#, Rust, PHP, Ruby and
Kotlin with tree-sitter's maintained grammar packages. Other languages, and files that do not
parse, have no definitions here and are cut in line windows instead.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Definition:
    """0-based [start, end) lines of one definition, leading decorators and doc comments
    included. ``members`` are a class-like body's own definitions; None for a function."""

    start: int
    end: int
    name: str
    members: tuple[Definition, ...] | None = None


# --- Python -----------------------------------------------------------------------------------


def _python(body: Iterable[ast.stmt]) -> tuple[Definition, ...]:
    found = []
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            members = _python(node.body) if isinstance(node, ast.ClassDef) else None
            found.append(Definition(first - 1, node.end_lineno or node.lineno, node.name, members))
    return tuple(found)


def python_definitions(text: str) -> tuple[Definition, ...] | None:
    """Top-level definitions of Python source, or None when it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old code, etc.
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _python(tree.body)


# --- tree-sitter ------------------------------------------------------------------------------

# node type -> whether its body holds member definitions (a class) or not (a function, a type)
JAVA_KINDS = {
    "class_declaration": True,
    "interface_declaration": True,
    "enum_declaration": True,
    "record_declaration": True,
    "annotation_type_declaration": True,
    "method_declaration": False,
    "constructor_declaration": False,
    "compact_constructor_declaration": False,
}
JS_KINDS = {
    "class_declaration": True,
    "abstract_class_declaration": True,
    "function_declaration": False,
    "generator_function_declaration": False,
    "method_definition": False,
    "interface_declaration": False,
    "type_alias_declaration": False,
    "enum_declaration": False,
}
GO_KINDS = {"function_declaration": False, "method_declaration": False, "type_declaration": False}
CSHARP_KINDS = {
    "class_declaration": True,
    "struct_declaration": True,
    "interface_declaration": True,
    "record_declaration": True,
    "enum_declaration": False,
    "delegate_declaration": False,
    "method_declaration": False,
    "constructor_declaration": False,
    "destructor_declaration": False,
    "operator_declaration": False,
    "property_declaration": False,
    "local_function_statement": False,
}
RUST_KINDS = {
    "function_item": False,
    "function_signature_item": False,
    "struct_item": False,
    "enum_item": False,
    "union_item": False,
    "type_item": False,
    "const_item": False,
    "static_item": False,
    "macro_definition": False,
    "impl_item": True,  # named by its type: impl Display for Cart -> Cart
    "trait_item": True,
    "mod_item": True,
}
PHP_KINDS = {
    "class_declaration": True,
    "interface_declaration": True,
    "trait_declaration": True,
    "enum_declaration": True,
    "function_definition": False,
    "method_declaration": False,
}
RUBY_KINDS = {"class": True, "module": True, "method": False, "singleton_method": False}
KOTLIN_KINDS = {
    "class_declaration": True,  # classes, interfaces, enum and data classes
    "object_declaration": True,
    "companion_object": True,  # unnamed: Companion, as Kotlin calls it
    "function_declaration": False,
    "property_declaration": False,
    "type_alias": False,
}
# Wrappers whose member definitions sit one level down: Java's enum body declarations, C#'s
# namespaces, a PHP namespace with braces.
FLATTEN = {
    "enum_body_declarations",
    "namespace_declaration",
    "declaration_list",
    "namespace_definition",
    "compound_statement",
}
COMMENTS = {"comment", "line_comment", "block_comment"}
# A definition's body when the grammar has no "body" field for it (Kotlin's class body).
BODIES = {"class_body", "enum_class_body"}
FUNCTION_VALUES = {
    "arrow_function",
    "function_expression",
    "function",
    "class",
    "generator_function",
}


@cache
def _parser(language: str) -> Any:
    """A tree-sitter parser for ``language``, or None when its grammar is not installed."""
    try:
        from tree_sitter import Language, Parser

        if language == "java":
            import tree_sitter_java

            raw = tree_sitter_java.language()
        elif language == "javascript":
            import tree_sitter_javascript

            raw = tree_sitter_javascript.language()
        elif language in ("typescript", "tsx"):
            import tree_sitter_typescript

            tsx = language == "tsx"
            raw = (
                tree_sitter_typescript.language_tsx()
                if tsx
                else tree_sitter_typescript.language_typescript()
            )
        elif language == "go":
            import tree_sitter_go

            raw = tree_sitter_go.language()
        elif language == "csharp":
            import tree_sitter_c_sharp

            raw = tree_sitter_c_sharp.language()
        elif language == "rust":
            import tree_sitter_rust

            raw = tree_sitter_rust.language()
        elif language == "php":
            import tree_sitter_php

            raw = tree_sitter_php.language_php()  # a file with HTML around its <?php too
        elif language == "ruby":
            import tree_sitter_ruby

            raw = tree_sitter_ruby.language()
        elif language == "kotlin":
            import tree_sitter_kotlin

            raw = tree_sitter_kotlin.language()
        else:
            return None
    except ImportError:
        return None
    return Parser(Language(raw))


def _text(node: Any) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None else ""


def _go_receiver(node: Any) -> str:
    """``Cart`` for ``func (c *Cart) Total()``."""
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return ""
    for param in receiver.named_children:
        kind = param.child_by_field_name("type")
        if kind is not None:
            return _text(kind).lstrip("*").split("[")[0]
    return ""


def _name_and_body(node: Any, kinds: dict[str, bool], language: str) -> tuple[str, Any, bool]:
    """(name, body node, body holds members) of a definition node; ("", None, False) if none."""
    kind = node.type
    if kind == "export_statement":
        inner = node.child_by_field_name("declaration")
        return _name_and_body(inner, kinds, language) if inner is not None else ("", None, False)
    if kind in ("lexical_declaration", "variable_declaration"):  # const f = () => …
        for declarator in node.named_children:
            value = declarator.child_by_field_name("value")
            if value is not None and value.type in FUNCTION_VALUES:
                return _text(declarator.child_by_field_name("name")), None, False
        return "", None, False
    if kind not in kinds:
        return "", None, False
    if language == "go" and kind == "type_declaration":
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        return _text(spec.child_by_field_name("name") if spec else None), None, False
    named = node.child_by_field_name("type" if kind == "impl_item" else "name")
    name = _text(named).split("<")[0]  # Rust's impl Cart<T> -> Cart
    if language == "go" and kind == "method_declaration":
        owner = _go_receiver(node)
        name = f"{owner}.{name}" if owner else name
    if kind == "companion_object":
        name = name or "Companion"
    if language == "kotlin" and kind == "property_declaration":
        declared = next((c for c in node.named_children if c.type == "variable_declaration"), None)
        name = _text(declared.named_children[0]) if declared and declared.named_children else ""
    body = node.child_by_field_name("body") or next(
        (c for c in node.named_children if c.type in BODIES), None
    )
    return name, body, kinds[kind]


def _tree_definitions(
    children: Iterable[Any], kinds: dict[str, bool], language: str
) -> tuple[Definition, ...]:
    found: list[Definition] = []
    comment_start: int | None = None
    previous_end = -2
    for node in children:
        if node.type in FLATTEN:
            found.extend(_tree_definitions(node.named_children, kinds, language))
            continue
        if node.type in COMMENTS:
            # a doc comment belongs to the definition right below it
            adjacent = comment_start is not None and node.start_point[0] <= previous_end + 1
            comment_start = comment_start if adjacent else node.start_point[0]
            previous_end = node.end_point[0]
            continue
        name, body, holds_members = _name_and_body(node, kinds, language)
        start = node.start_point[0]
        if comment_start is not None and start <= previous_end + 1:
            start = comment_start
        comment_start, previous_end = None, node.end_point[0]
        if not name:
            continue
        members = None
        if holds_members and body is not None:
            members = _tree_definitions(body.named_children, kinds, language)
        found.append(Definition(start, node.end_point[0] + 1, name, members))
    return tuple(found)


KINDS: dict[str, dict[str, bool]] = {
    "java": JAVA_KINDS,
    "javascript": JS_KINDS,
    "typescript": JS_KINDS,
    "tsx": JS_KINDS,
    "go": GO_KINDS,
    "csharp": CSHARP_KINDS,
    "rust": RUST_KINDS,
    "php": PHP_KINDS,
    "ruby": RUBY_KINDS,
    "kotlin": KOTLIN_KINDS,
}


def tree_sitter_definitions(language: str, text: str) -> tuple[Definition, ...] | None:
    """Top-level definitions by tree-sitter, or None without a grammar or when the file has
    syntax errors (line windows serve it better than a partial tree)."""
    parser = _parser(language)
    if parser is None:
        return None
    tree = parser.parse(text.encode("utf-8", errors="replace"))
    if tree.root_node.has_error:
        return None
    return _tree_definitions(tree.root_node.named_children, KINDS[language], language)


def definitions(language: str, path: str, text: str) -> tuple[Definition, ...] | None:
    """The file's top-level definitions, or None when it has to be cut in line windows."""
    if language == "python":
        return python_definitions(text)
    if language == "typescript" and path.endswith(".tsx"):
        language = "tsx"
    if language in KINDS:
        return tree_sitter_definitions(language, text)
    return None
