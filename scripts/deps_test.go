// Package scripts holds the tests of the repository's shell scripts.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Stubs for what deps.sh runs. The service stub keeps each service's state
// as a file NAME.running in $STATE; the apt-get stub plays a Debian package
// install: each package's maintainer script starts the package's service
// (mariadb-server's is mariadb) unless the policy-rc.d at $POLICY forbids it
// (exit 101), as invoke-rc.d does. Both log what they do to $STATE/log.
var stubs = map[string]string{
	"id": "#!/bin/sh\necho 0\n",
	"ls": "#!/bin/sh\nexit 2\n", // no /usr/lib/postgresql/*/bin
	"service": `#!/bin/sh
case "$2" in
status) [ -e "$STATE/$1.running" ] ;;
start) echo "start $1" >>"$STATE/log"; touch "$STATE/$1.running" ;;
stop) echo "stop $1" >>"$STATE/log"; rm -f "$STATE/$1.running" ;;
*) exit 1 ;;
esac
`,
	"apt-get": `#!/bin/sh
[ "$1" = install ] || exit 0
shift
for pkg; do
	case "$pkg" in -*) continue ;; esac
	echo "install $pkg" >>"$STATE/log"
	svc=$pkg
	[ "$pkg" = mariadb-server ] && svc=mariadb
	rc=0
	if [ -x "$POLICY" ]; then "$POLICY" "$svc" start; rc=$?; fi
	[ "$rc" = 101 ] || service "$svc" start
done
`,
	"go": "#!/bin/sh\n[ \"$1 $2\" = \"env GOPATH\" ] && echo \"$GOPATH_STUB\"\n",
}

// TestDepsLeavesRunningServicesAlone runs deps.sh as root with apt-get and
// service replaced by stubs: it may stop only a service that its own
// install started, never one that was running before, and it must leave
// the system's policy-rc.d as it found it.
func TestDepsLeavesRunningServicesAlone(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("no bash, which deps.sh needs:", err)
	}
	script, err := filepath.Abs("deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	const allowAll = "#!/bin/sh\nexit 0\n"
	for _, tc := range []struct {
		name        string
		haveRedis   bool   // redis-server is installed
		haveMariaDB bool   // mariadb-install-db and mariadbd are installed
		noPromtool  bool   // promtool is missing
		noChromium  bool   // chromium is not installed
		noSystemd   bool   // systemd-analyze is not installed
		noPytest    bool   // Debian's python3 cannot import pytest
		noMypy      bool   // mypy is not installed
		running     string // services running before
		policy      string // the system's policy-rc.d; empty: none
		wantRunning string // services running after
		wantLog     string
	}{
		{
			name:      "redis running, postgresql missing",
			haveRedis: true, haveMariaDB: true, running: "redis-server",
			wantRunning: "redis-server",
			wantLog:     "install postgresql\n",
		},
		{
			name:        "nothing running, no policy-rc.d",
			haveMariaDB: true,
			wantLog:     "install postgresql\ninstall redis-server\n",
		},
		{
			name:    "postgresql running, policy-rc.d allowing starts",
			running: "postgresql", policy: allowAll, haveMariaDB: true,
			wantRunning: "postgresql",
			// A package's start of its running service changes nothing.
			wantLog: "install postgresql\nstart postgresql\ninstall redis-server\nstart redis-server\nstop redis-server\n",
		},
		{
			// mariadb-server's service is called mariadb.
			name:      "mariadb running, mariadb-server missing, policy-rc.d allowing starts",
			haveRedis: true, running: "mariadb", policy: allowAll,
			wantRunning: "mariadb",
			wantLog:     "install postgresql\nstart postgresql\ninstall mariadb-server\nstart mariadb\nstop postgresql\n",
		},
		{
			name:      "systemd-analyze missing",
			haveRedis: true, haveMariaDB: true, noSystemd: true,
			wantLog: "install postgresql\ninstall systemd\n",
		},
		{
			name:      "chromium missing",
			haveRedis: true, haveMariaDB: true, noChromium: true,
			wantLog: "install postgresql\ninstall chromium\n",
		},
		{
			name:      "mariadb-server missing, nothing running, policy-rc.d allowing starts",
			haveRedis: true, policy: allowAll,
			wantLog: "install postgresql\nstart postgresql\ninstall mariadb-server\nstart mariadb\nstop postgresql\nstop mariadb\n",
		},
		{
			name:      "a Python module and mypy missing",
			haveRedis: true, haveMariaDB: true, noPytest: true, noMypy: true,
			wantLog: "install postgresql\ninstall python3-pytest\ninstall mypy\n",
		},
		{
			// promtool comes in Debian's prometheus package, whose service
			// the install must not leave running.
			name:      "promtool missing, policy-rc.d allowing starts",
			haveRedis: true, haveMariaDB: true, noPromtool: true, policy: allowAll,
			wantLog: "install postgresql\nstart postgresql\ninstall prometheus\nstart prometheus\nstop postgresql\nstop prometheus\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, state, gopath := filepath.Join(dir, "bin"), filepath.Join(dir, "state"), filepath.Join(dir, "gopath")
			policy := filepath.Join(dir, "policy-rc.d")
			for _, d := range []string{bin, state, filepath.Join(gopath, "bin")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			files := map[string]string{
				filepath.Join(gopath, "bin", "staticcheck"): "#!/bin/sh\necho 'staticcheck 2025.1.1 (0.8.2)'\n",
			}
			if !tc.noPromtool {
				files[filepath.Join(bin, "promtool")] = "#!/bin/sh\nexit 0\n"
			}
			for name, body := range stubs {
				files[filepath.Join(bin, name)] = body
			}
			if tc.haveRedis {
				files[filepath.Join(bin, "redis-server")] = "#!/bin/sh\nexit 0\n"
			}
			if !tc.noSystemd {
				files[filepath.Join(bin, "systemd-analyze")] = "#!/bin/sh\nexit 0\n"
			}
			if !tc.noChromium {
				files[filepath.Join(bin, "chromium")] = "#!/bin/sh\nexit 0\n"
			}
			if !tc.noMypy {
				files[filepath.Join(bin, "mypy")] = "#!/bin/sh\nexit 0\n"
			}
			// A python3 that imports every module but, if asked, pytest.
			python := filepath.Join(dir, "python3")
			files[python] = "#!/bin/sh\nexit 0\n"
			if tc.noPytest {
				files[python] = "#!/bin/sh\n[ \"$2\" = \"import pytest\" ] && exit 1\nexit 0\n"
			}
			if tc.haveMariaDB {
				files[filepath.Join(bin, "mariadb-install-db")] = "#!/bin/sh\nexit 0\n"
				files[filepath.Join(bin, "mariadbd")] = "#!/bin/sh\nexit 0\n"
			}
			if tc.policy != "" {
				files[policy] = tc.policy
			}
			for svc := range strings.FieldsSeq(tc.running) {
				files[filepath.Join(state, svc+".running")] = ""
			}
			for path, body := range files {
				if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// The few real tools the script and the stubs use, and no
			// others: PATH is the stub directory alone.
			for _, tool := range []string{"sh", "sort", "tail", "grep", "chmod", "rm", "touch"} {
				real, err := exec.LookPath(tool)
				if err != nil {
					t.Fatalf("no %s, which deps.sh needs: %v", tool, err)
				}
				if err := os.Symlink(real, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}

			cmd := exec.Command(bash, script)
			cmd.Env = []string{"PATH=" + bin, "STATE=" + state, "POLICY=" + policy,
				"LEASE_DEPS_POLICY_RC_D=" + policy, "GOPATH_STUB=" + gopath, "LEASE_DEPS_PYTHON=" + python}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("deps.sh: %v\n%s", err, out)
			}

			log, _ := os.ReadFile(filepath.Join(state, "log"))
			if string(log) != tc.wantLog {
				t.Errorf("apt-get and service did\n%s\nwant\n%s", log, tc.wantLog)
			}
			entries, err := os.ReadDir(state)
			if err != nil {
				t.Fatal(err)
			}
			var running []string
			for _, e := range entries {
				if svc, ok := strings.CutSuffix(e.Name(), ".running"); ok {
					running = append(running, svc)
				}
			}
			if got := strings.Join(running, " "); got != tc.wantRunning {
				t.Errorf("running after deps.sh: %q, want %q (before: %q)", got, tc.wantRunning, tc.running)
			}
			got, err := os.ReadFile(policy)
			switch {
			case tc.policy == "" && err == nil:
				t.Errorf("deps.sh left its policy-rc.d behind: %q", got)
			case tc.policy != "" && string(got) != tc.policy:
				t.Errorf("the system's policy-rc.d is now %q (%v), want it untouched", got, err)
			}
		})
	}
}
