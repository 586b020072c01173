// Panics for tracehound's corpus of real error records; needs no crate, built with plain rustc by
// ../../generate.py. The first argument is the record's name (printed as a separator line that
// the generator drops), the second which panic to cause. Frames the tests expect are marked
// "frame:" on their line.
use std::collections::HashMap;

fn parse_quantity(raw: &str) -> u32 {
    raw.trim().parse().expect("quantity must be a number") // frame: parse_quantity
}

fn line_price(prices: &[u32], line: usize) -> u32 {
    prices[line] // frame: line_price
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    eprintln!("=== tracehound-record {} ===", args[1]);
    let mut stock: HashMap<&str, u32> = HashMap::new();
    match args[2].as_str() {
        "expect" => {
            let quantity = parse_quantity("4x2"); // frame: main
            stock.insert("sku-001", quantity);
        }
        "index" => {
            let prices = vec![250, 990, 1500];
            stock.insert("sku-002", line_price(&prices, 7)); // frame: main
        }
        other => panic!("unknown case {other}"),
    }
    println!("{stock:?}");
}
