package redisstore

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkFloorCost measures what the token floor (Bump) costs a grant:
// the acquire and release scripts as they are (a grant GETs the floor)
// beside the same with the floor taken out of acquire.lua, on a durable
// server (appendfsync always), interleaved (benchutil.Interleave) so that
// both meet the same moments of the machine. Each client has its own key,
// so every acquire grants.
func BenchmarkFloorCost(b *testing.B) {
	start := strings.Index(acquireSrc, "local floor = ")
	end := strings.Index(acquireSrc, "\nif token >= ")
	if start < 0 || end < start {
		b.Fatal("the floor's lines are not where the benchmark looks for them in acquire.lua")
	}
	benchScriptVariants(b, []scriptVariant{
		{"floor", acquireScript, releaseScript},
		{"no-floor", redis.NewScript(acquireSrc[:start] + acquireSrc[end:]), releaseScript},
	})
}
