package main

// The seed's expected console output is { value: "written-by-b", lastToken: 2 }.
func Example() {
	main()
	// Output:
	// A acquired job at t=0: token 1
	// B acquired job at t=101: token 2
	// B wrote written-by-b
	// A's late write rejected: fence: stale token 1 for "job": highest accepted is 2 (mode strict)
	// { value: "written-by-b", lastToken: 2 }
	// strict: B's second write with token 2 is rejected
	// at-least: B's second write with token 2 is accepted
}
