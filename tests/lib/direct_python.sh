# direct_python.sh - sourced by the test and benchmark runners (tests/run.sh,
# tests/bench/run.sh): python3 on their PATH is the interpreter itself.
#
# Where python3 is a version manager's shim (pyenv's on these machines: a bash
# script that works out the version at every start, about 0.5 s of CPU against
# 0.05 s for the interpreter), the tests, which start python3 hundreds of
# times, spent a fifth of their CPU in it. The interpreter the shim picks now
# (its sys.executable) is linked as DIR/python3, and DIR put first on PATH; in
# a virtual environment, or where python3 already is the interpreter, nothing
# changes.
direct_python3() { # direct_python3 DIR
	local exe
	exe=$(python3 -c 'import sys; print(sys.executable if sys.prefix == sys.base_prefix else "")' 2>/dev/null) || return 0
	case $exe in /*) ;; *) return 0 ;; esac
	[ -x "$exe" ] && [ "$exe" != "$(command -v python3)" ] || return 0
	mkdir -p "$1" && ln -sfn "$exe" "$1/python3" || return 0
	PATH="$(cd "$1" && pwd):$PATH"
	export PATH
}
