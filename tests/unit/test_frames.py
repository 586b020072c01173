"""Unit tests of parsing stack frames out of traces and mapping them onto repo paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core.domain import Frame
from shared.intake.frames import PathMapper, normalize_path
from shared.intake.traces import parse_frames

FRAMES = Path(__file__).parents[1] / "data" / "frames"  # traces with lines over 100 characters

PYTHON = """Traceback (most recent call last):
  File "/srv/app/shop/api.py", line 10, in handle
    return checkout(cart)
  File "/srv/app/shop/services/pricing.py", line 42, in apply_discount
    return total / count
ZeroDivisionError: division by zero
"""

JAVA = """java.lang.IllegalStateException: wrapper
\tat com.shop.web.OrderController.place(OrderController.java:31)
\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:897)
Caused by: java.lang.ArithmeticException: / by zero
\tat com.shop.pricing.Discounts$Rule.apply(Discounts.java:88)
\tat com.shop.pricing.Discounts.total(Discounts.java:40)
\tat java.base/java.util.ArrayList.forEach(ArrayList.java:1541)
"""

NODE = """TypeError: Cannot read properties of undefined (reading 'id')
    at findUser (/app/src/users/repo.js:17:22)
    at async Router.handle (/app/node_modules/express/lib/router/index.js:284:7)
    at /app/src/server.js:40:5
    at node:internal/process/task_queues:95:5
"""

GO = """panic: runtime error: index out of range [3] with length 3

goroutine 1 [running]:
main.(*Store).Get(...)
\t/app/store/store.go:27 +0x1d
main.handler(0xc000010000)
\t/app/cmd/server/main.go:14 +0x45
runtime.main()
\t/usr/local/go/src/runtime/proc.go:250 +0x207
"""

IPYTHON = """TypeError                                 Traceback (most recent call last)
<ipython-input-13-2486f2ccf928> in <module>()
----> 1 x == None

/Users/a/anaconda3/lib/python3.5/site-packages/astropy/units/core.py in __eq__(self, other)
   1700     def __eq__(self, other):
-> 1701         other = Unit(other, parse_strict='silent')
   1702

TypeError: None is not a valid Unit
"""

IPYTHON8 = """IndexError                                Traceback (most recent call last)
Cell In [4], line 1
----> 1 identify_format("write", Table, "bububu.ecsv", None, [], {})

File ~/py310/lib/python3.10/site-packages/astropy/io/registry/compat.py:52, in wrapper(registry)
     51 # get and call bound method
---> 52 return getattr(registry, method_name)(*args, **kwargs)
"""

PYTEST = """/usr/local/lib/python3.8/site-packages/_pytest/pathlib.py:565: in import_path
    importlib.import_module(module_name)
<frozen importlib._bootstrap>:1014: in _gcd_import
    ???
..\\..\\Python310\\lib\\site-packages\\astropy\\units\\core.py:2554: ValueError
"""


# Rust 1.80+: the panic's place, then RUST_BACKTRACE=1's numbered function lines and places.
RUST = (FRAMES / "rust-backtrace.txt").read_text()
RUST_NO_BACKTRACE = (FRAMES / "rust-panic.txt").read_text()

# PHP (Exception::__toString in the error log): the previous exception first, then "Next".
PHP = (FRAMES / "php-chained.txt").read_text()

# .NET's Exception.ToString() with symbols, and Mono's report of the same (twice, as Mono does).
DOTNET = (FRAMES / "dotnet-inner.txt").read_text()
MONO = (FRAMES / "mono-unhandled.txt").read_text()

# Ruby 3.1 (backquote) with a cause printed after, and 3.4 (quotes, Class#method).
RUBY = (FRAMES / "ruby31-cause.txt").read_text()
RUBY34 = (FRAMES / "ruby34.txt").read_text()


def where(frames: list[Frame]) -> list[tuple[str, int | None, str]]:
    return [(f.file, f.line, f.function) for f in frames]


def test_python_frames_innermost_first_with_their_code_line() -> None:
    frames = parse_frames(PYTHON)
    assert where(frames) == [
        ("/srv/app/shop/services/pricing.py", 42, "apply_discount"),
        ("/srv/app/shop/api.py", 10, "handle"),
    ]
    assert frames[0].code == "return total / count"


def test_java_caused_by_frames_come_first_and_carry_their_class() -> None:
    frames = parse_frames(JAVA)
    assert [(f.module, f.function, f.line) for f in frames][:3] == [
        ("com.shop.pricing.Discounts$Rule", "apply", 88),
        ("com.shop.pricing.Discounts", "total", 40),
        ("java.util.ArrayList", "forEach", 1541),
    ]
    assert frames[3].module == "com.shop.web.OrderController"
    assert {f.language for f in frames} == {"java"}


def test_node_frames_with_and_without_function_names() -> None:
    frames = parse_frames(NODE)
    assert where(frames)[:3] == [
        ("/app/src/users/repo.js", 17, "findUser"),
        ("/app/node_modules/express/lib/router/index.js", 284, "Router.handle"),
        ("/app/src/server.js", 40, ""),
    ]


def test_go_frames_take_the_function_from_the_line_above() -> None:
    frames = parse_frames(GO)
    assert [(f.file, f.line, f.function, f.module) for f in frames][:2] == [
        ("/app/store/store.go", 27, "Get", "main.(*Store)"),
        ("/app/cmd/server/main.go", 14, "handler", "main"),
    ]


def test_ipython_frames_take_the_line_from_the_arrow() -> None:
    [frame] = parse_frames(IPYTHON)
    assert (frame.line, frame.function) == (1701, "__eq__")
    assert frame.code.startswith("other = Unit(other")
    [frame8] = parse_frames(IPYTHON8)
    assert (frame8.file.endswith("astropy/io/registry/compat.py"), frame8.line) == (True, 52)


def test_pytest_frames_including_the_final_location_line() -> None:
    frames = parse_frames(PYTEST)
    assert [f.line for f in frames] == [2554, 565]
    assert frames[0].file.endswith("astropy\\units\\core.py")


def test_rust_backtrace_frames_and_the_panic_place_when_there_is_no_backtrace() -> None:
    frames = parse_frames(RUST)
    assert [(f.file, f.line, f.function, f.module) for f in frames][2:5] == [
        ("./src/orders/parse.rs", 7, "quantity", "shop::orders::parse"),
        (frames[3].file, 9, "from_str", "serde_json::de"),
        ("./src/main.rs", 20, "main", "shop"),
    ]
    assert len(frames) == 5  # the panic's place is frame 2's: not read twice
    assert {f.language for f in frames} == {"rust"}
    assert where(parse_frames(RUST_NO_BACKTRACE)) == [("src/orders/parse.rs", 7, "")]


def test_php_frames_start_at_the_throw_and_run_in_the_function_the_next_line_calls() -> None:
    frames = parse_frames(PHP)
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.module, f.function) for f in frames] == [
        ("Gateway.php", 15, "App\\Payment\\Gateway", "send"),
        ("Gateway.php", 10, "App\\Payment\\Gateway", "charge"),
        ("Checkout.php", 30, "App\\Orders\\Checkout", "settle"),
        ("Pipeline.php", 7, "", "{main}"),  # the script's own code, as PHP names it
        ("Checkout.php", 32, "App\\Orders\\Checkout", "settle"),
        ("index.php", 17, "", "{main}"),
    ]
    assert {f.language for f in frames} == {"php"}


def test_dotnet_frames_with_places_inner_exception_first_compiler_names_undone() -> None:
    frames = parse_frames(DOTNET)
    assert [(f.module, f.function, f.line, f.language) for f in frames] == [
        ("Shop.Payments.Gateway", "Total", 14, "csharp"),
        ("Shop.Orders.Checkout", "PlaceAsync", 15, "csharp"),
        ("Shop.Orders.Checkout", "Place", 19, "csharp"),
        ("Shop.Pricing", "total", 8, "fsharp"),
    ]


def test_mono_frames_once_though_mono_reports_twice_and_none_without_symbols() -> None:
    from shared.intake.trace import read_trace

    frames = read_trace(MONO).frames
    assert [(f.file, f.line, f.function) for f in frames] == [
        ("Shop/Gateway.cs", 14, "Total"),
        ("Shop/Checkout.cs", 19, "Place"),
    ]


def test_ruby_frames_with_the_cause_first_and_block_and_rescue_names_undone() -> None:
    frames = parse_frames(RUBY)
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.function) for f in frames] == [
        ("checkout.rb", 10, "Integer"),
        ("checkout.rb", 10, "place"),
        ("records.rb", 13, "<main>"),
        ("checkout.rb", 12, "place"),
        ("checkout.rb", 9, "place"),
        ("forwardable.rb", 238, "place"),
        ("records.rb", 13, "<main>"),
    ]
    assert [(f.module, f.function) for f in parse_frames(RUBY34)] == [
        ("Order", "total"),
        ("Array", "each"),
        ("OrdersController", "show"),
    ]


def test_text_without_frames_has_none() -> None:
    assert parse_frames("ValueError: bad input\nsomething else happened") == []


REPO = [
    "shop/__init__.py",
    "shop/api.py",
    "shop/services/pricing.py",
    "src/main/java/com/shop/pricing/Discounts.java",
    "src/users/repo.js",
    "store/store.go",
    "version.py",
    "src/_pytest/pathlib.py",
    "requests/packages/urllib3/response.py",
    "astropy/units/core.py",
    "build/lib/astropy/units/core.py",
    "src/main/kotlin/com/shop/orders/Checkout.kt",
    "src/orders/parse.rs",
    "src/main.rs",
    "src/Payment/Gateway.php",
    "src/Orders/Checkout.php",
    "vendor/laravel/framework/src/Pipeline.php",
    "src/Shop/Payments/Gateway.cs",
    "src/Shop/Orders/Checkout.cs",
    "lib/shop/checkout.rb",
    "lib/forwardable.rb",
]

# Kotlin's traces are the JVM's: top-level functions in FileKt, a lambda in $name$N.
KOTLIN = """Exception in thread "main" java.lang.IllegalStateException: could not place order 42
\tat com.shop.orders.CheckoutKt.place(Checkout.kt:12)
\tat com.shop.orders.Checkout$settle$1.invokeSuspend(Checkout.kt:30)
\tat kotlin.coroutines.jvm.internal.BaseContinuationImpl.resumeWith(ContinuationImpl.kt:33)
\tat com.shop.MainKt.main(Main.kt:5)
"""


def mapped_paths(text: str) -> list[str]:
    return [m.path for m in PathMapper(REPO).map_frames(parse_frames(text))]


def test_container_prefixes_are_stripped_by_suffix_matching() -> None:
    assert mapped_paths(PYTHON) == ["shop/services/pricing.py", "shop/api.py"]


def test_java_package_and_file_map_onto_the_source_tree_libraries_do_not() -> None:
    assert mapped_paths(JAVA) == [
        "src/main/java/com/shop/pricing/Discounts.java",
        "src/main/java/com/shop/pricing/Discounts.java",
    ]


def test_kotlin_frames_map_onto_the_kotlin_tree_and_a_lambda_names_its_function() -> None:
    mapped = PathMapper(REPO).map_frames(parse_frames(KOTLIN))
    assert [(m.path, m.line, m.function) for m in mapped] == [
        ("src/main/kotlin/com/shop/orders/Checkout.kt", 12, "place"),
        ("src/main/kotlin/com/shop/orders/Checkout.kt", 30, "settle"),
    ]


def test_rust_php_dotnet_and_ruby_frames_map_and_their_libraries_do_not() -> None:
    assert mapped_paths(RUST) == ["src/orders/parse.rs", "src/main.rs"]  # not the crate's
    assert mapped_paths(PHP) == [
        "src/Payment/Gateway.php",
        "src/Payment/Gateway.php",
        "src/Orders/Checkout.php",
        "vendor/laravel/framework/src/Pipeline.php",
        "src/Orders/Checkout.php",
    ]
    assert PathMapper(REPO).map_frames(parse_frames(PHP))[3].vendored
    assert mapped_paths(DOTNET) == [
        "src/Shop/Payments/Gateway.cs",
        *["src/Shop/Orders/Checkout.cs"] * 2,
    ]
    # Ruby's standard library is not the repo's, though the repo has a file of that name.
    assert mapped_paths(RUBY) == ["lib/shop/checkout.rb"] * 4


def test_node_and_go_frames_map_and_node_modules_and_goroot_do_not() -> None:
    assert mapped_paths(NODE) == ["src/users/repo.js"]
    assert mapped_paths(GO) == ["store/store.go"]


def test_site_packages_is_stripped_and_the_shortest_repo_path_wins() -> None:
    assert mapped_paths(IPYTHON) == ["astropy/units/core.py"]
    assert mapped_paths(PYTEST) == ["astropy/units/core.py", "src/_pytest/pathlib.py"]


def test_another_packages_frames_and_stdlib_are_ignored() -> None:
    mapper = PathMapper(REPO)
    # an installed package's path must match whole: numpy's core.py is not astropy's
    assert mapper.map_file("/venv/lib/python3.9/site-packages/numpy/units/core.py") is None
    assert mapper.map_file("/usr/lib/python3.6/distutils/version.py") is None
    assert mapper.map_file("<frozen importlib._bootstrap>") is None
    assert mapper.map_file("<stdin>") is None


@pytest.mark.parametrize(
    "outside",
    [
        "/etc/passwd",
        "/home/me/../../etc/shadow",
        "C:\\Windows\\system32\\drivers\\x.py",
        "~/.ssh/id_rsa",
    ],
)
def test_frames_outside_the_repo_are_ignored(outside: str) -> None:
    assert PathMapper(REPO).map_file(outside) is None


def test_a_bare_file_name_only_maps_to_a_top_level_file() -> None:
    mapper = PathMapper(REPO)
    assert mapper.map_file("pricing.py") is None  # could be any pricing.py
    assert mapper.map_file("version.py") == "version.py"
    assert mapper.map_file("/opt/project/shop/services/pricing.py") == "shop/services/pricing.py"


def test_vendored_frames_are_marked() -> None:
    trace = 'File "/x/site-packages/requests/packages/urllib3/response.py", line 3, in read\n'
    [frame] = PathMapper(REPO).map_frames(parse_frames(trace))
    assert frame.vendored and frame.path == "requests/packages/urllib3/response.py"


def test_normalize_strips_eggs_drives_and_dot_dots() -> None:
    assert normalize_path("C:\\Py\\lib\\site-packages\\pkg\\mod.py") == (["pkg", "mod.py"], True)
    assert normalize_path("/x/requests-2.3.0-py2.7.egg/requests/models.py") == (
        ["requests", "models.py"],
        True,
    )
    assert normalize_path("../../src/app.py") == (["src", "app.py"], False)
