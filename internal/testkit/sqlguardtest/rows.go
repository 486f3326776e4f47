package sqlguardtest

import (
	"errors"
	"fmt"

	"github.com/leasehq/lease/fence"
)

// RowError is the answer of an UpdateRow on the row of table whose id is
// resource, as a guardtest.ValueGuard keeping that resource gives it: a
// *fence.StaleTokenError names the row ("table/resource"), and is returned
// naming the resource alone; any other error is returned as it is.
func RowError(err error, table, resource string) error {
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) {
		return err
	}
	if want := table + "/" + resource; stale.Resource != want {
		return fmt.Errorf("sqlguardtest: StaleTokenError names %q, want %q", stale.Resource, want)
	}
	return &fence.StaleTokenError{Resource: resource, Token: stale.Token, Highest: stale.Highest, Mode: stale.Mode}
}
