// Runtime panics for tracehound's corpus of real error records, run with `go run` by
// ../generate.py (stdlib only, no module needed). The first argument is the record's name,
// printed as a separator line that the generator drops; the second which panic to cause.
package main

import (
	"fmt"
	"os"
)

type Order struct {
	ID    int
	Lines []int
}

func countSku(counts map[string]int, sku string) {
	counts[sku]++ // panics: assignment to entry in nil map
}

func tally(skus []string) map[string]int {
	var counts map[string]int
	for _, sku := range skus {
		countSku(counts, sku)
	}
	return counts
}

func lineQuantity(order Order, line int) int {
	return order.Lines[line] // panics: index out of range
}

func main() {
	fmt.Fprintf(os.Stderr, "=== tracehound-record %s ===\n", os.Args[1])
	switch os.Args[2] {
	case "nil-map":
		fmt.Println(tally([]string{"sku-001", "sku-002"}))
	case "index":
		fmt.Println(lineQuantity(Order{ID: 42, Lines: []int{1, 2, 3}}, 5))
	default:
		panic("unknown case " + os.Args[2])
	}
}
