package boltstore_test

// crashChild runs the child side of TestCrash when the environment asks for
// it, and reports whether it did.
func crashChild() bool { return false }
