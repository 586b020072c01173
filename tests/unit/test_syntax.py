"""Definitions read by tree-sitter grammars, and the chunks that follow them."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.index.chunking import chunk_file
from shared.index.syntax import definitions

JAVA = """package com.acme.shop;

import java.util.List;

/**
 * Prices an order.
 */
public class PricingService {
    private final TaxTable taxes;

    public PricingService(TaxTable taxes) {
        this.taxes = taxes;
    }

    // Splits the discount over the lines.
    @Override
    public long allocateDiscount(Order order, long discount) {
        return discount / order.lines().size();
    }

    enum Mode { FLAT, SHARE; int weight() { return 1; } }
}
"""

TS = """import { Cart } from "./cart";

export interface Priced { total(): number }

/** Sums a cart. */
export function sumCart(cart: Cart): number {
  return cart.items.reduce((a, b) => a + b.price, 0);
}

export const applyCoupon = (total: number, code: string): number => {
  return code === "HALF" ? total / 2 : total;
};

class Checkout {
  pay(cart: Cart) {
    return sumCart(cart);
  }
}
"""

GO = """package cart

import "errors"

// ErrEmpty is returned for an empty cart.
var ErrEmpty = errors.New("empty cart")

// Cart holds line items.
type Cart struct {
	Items []Item
}

// Total sums the cart.
func (c *Cart) Total() (int, error) {
	if len(c.Items) == 0 {
		return 0, ErrEmpty
	}
	return c.Items[0].Price, nil
}

func New() *Cart { return &Cart{} }
"""


def names(language: str, path: str, text: str) -> list[tuple[str, int, int]]:
    found = definitions(language, path, text)
    assert found is not None
    return [(d.name, d.start + 1, d.end) for d in found]


def test_java_classes_methods_and_their_doc_comments() -> None:
    [cls] = definitions("java", "PricingService.java", JAVA) or ()
    assert (cls.name, cls.start + 1, cls.end) == ("PricingService", 5, 22)  # Javadoc included
    assert cls.members is not None
    members = [(m.name, m.start + 1, m.end) for m in cls.members]
    assert members == [
        ("PricingService", 11, 13),  # the constructor
        ("allocateDiscount", 15, 19),  # its line comment and annotation included
        ("Mode", 21, 21),
    ]


def test_typescript_functions_arrow_constants_interfaces_and_classes() -> None:
    assert names("typescript", "src/checkout.ts", TS) == [
        ("Priced", 3, 3),
        ("sumCart", 5, 8),
        ("applyCoupon", 10, 12),
        ("Checkout", 14, 18),
    ]


def test_go_methods_are_named_after_their_receiver() -> None:
    assert names("go", "cart/cart.go", GO) == [
        ("Cart", 8, 11),
        ("Cart.Total", 13, 19),
        ("New", 21, 21),
    ]


def test_chunks_of_a_big_java_class_follow_its_methods() -> None:
    body = "\n".join(
        f"    public int method{i}(int x) {{\n"
        + "        x += 1;\n" * 12
        + "        return x;\n    }\n"
        for i in range(8)
    )
    text = f"package a;\n\npublic class Big {{\n{body}}}\n"
    chunks = chunk_file("svc", "src/Big.java", text)
    symbols = [c.symbol for c in chunks]
    assert "Big.method0" in symbols[0] and "Big.method7" in symbols[-1]
    assert all(c.text.count("public int method") <= 2 for c in chunks)
    # a frame's line lands in the chunk of the method holding it
    line = text.splitlines().index("    public int method5(int x) {") + 3
    [holder] = [c for c in chunks if c.start_line <= line <= c.end_line]
    assert "method5" in holder.symbol


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("web/broken.js", "function ok() { return 1 }\nfunction broken( {\n"),
        ("svc/broken.go", "package a\nfunc (\n"),
    ],
)
def test_files_with_syntax_errors_fall_back_to_line_windows(path: str, text: str) -> None:
    assert definitions("javascript" if path.endswith(".js") else "go", path, text) is None
    assert [c.symbol for c in chunk_file("svc", path, text)] == [""]


def test_languages_without_a_grammar_have_no_definitions() -> None:
    assert definitions("swift", "Sources/App.swift", "func main() {}\n") is None


RECORDS = Path(__file__).parents[1] / "data" / "records"  # the runtimes' test programs

KOTLIN = """package com.shop.orders

/** Places orders. */
class Checkout(private val gateway: Gateway) {
    val name: String = "checkout"

    /** Charges the order. */
    fun place(id: Int) {
        gateway.charge(id)
    }

    companion object {
        fun create() = Checkout(Gateway())
    }
}

object Registry {
    fun get(): Checkout = Checkout.create()
}

fun total(items: List<Int>): Int = items.sum()
"""


def tree(language: str, path: str, text: str) -> list[tuple[str, int, int, list[str]]]:
    found = definitions(language, path, text) or ()
    return [(d.name, d.start + 1, d.end, [m.name for m in d.members or ()]) for d in found]


def test_csharp_rust_php_ruby_and_kotlin_definitions_with_their_members() -> None:
    def read(rel: str) -> str:
        return (RECORDS / rel).read_text()

    assert tree("csharp", "Shop/Checkout.cs", read("dotnet/Shop/Checkout.cs")) == [
        ("Checkout", 7, 22, ["Place"]),  # inside its namespace; fields are no definitions
    ]
    assert tree("rust", "src/panic.rs", read("rust/src/panic.rs")) == [
        ("parse_quantity", 7, 9, []),
        ("line_price", 11, 13, []),
        ("main", 15, 31, []),
    ]
    php = tree("php", "src/Orders/Checkout.php", read("php/src/Orders/Checkout.php"))
    assert [(n, members) for n, _, _, members in php] == [
        ("OrderNotFoundException", []),
        ("StorageException", []),
        ("Checkout", ["__construct", "place", "settle", "load"]),
    ]
    assert tree("ruby", "lib/shop/checkout.rb", read("ruby/lib/shop/checkout.rb")) == [
        ("Shop", 1, 15, ["CheckoutError", "Checkout"]),
    ]
    assert tree("kotlin", "Checkout.kt", KOTLIN) == [
        ("Checkout", 3, 15, ["name", "place", "Companion"]),  # its KDoc included
        ("Registry", 17, 19, ["get"]),
        ("total", 21, 21, []),
    ]


def test_a_frame_of_each_new_language_lands_in_the_chunk_of_its_function() -> None:
    for rel, line, function in [
        ("dotnet/Shop/Gateway.cs", 14, "Total"),
        ("php/src/Payment/Gateway.php", 15, "send"),
        ("ruby/lib/shop/checkout.rb", 6, "total"),
        ("rust/src/panic.rs", 11, "line_price"),
    ]:
        text = (RECORDS / rel).read_text()
        chunks = chunk_file("svc", rel, text, size=6, overlap=0)
        [holder] = [c for c in chunks if c.start_line <= line <= c.end_line]
        assert function in holder.symbol, (rel, holder.symbol)
