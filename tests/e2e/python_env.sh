# Sourced by the tests that read Loom's files with the tools people use from PyPI: $py is the
# pinned Python environment's interpreter (scripts/python-requirements.txt) and $r50k GPT-2's
# rank file, both installed by `bash scripts/bootstrap.sh test`, which `make test` runs first.
# `need_python MODULE...` and `need_file PATH` end the test as skipped (77) with one line saying
# why where the environment lacks them; under CI=true they fail it instead, since CI's machine
# reaches PyPI and a skip there would hide a check.
py=${XDG_CACHE_HOME:-$HOME/.cache}/loom/venv/bin/python
r50k=${XDG_CACHE_HOME:-$HOME/.cache}/loom/r50k_base.tiktoken
python_env_missing() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $* (bash scripts/bootstrap.sh test installs it)"
    exit 1
  fi
  echo "SKIP: $*: run bash scripts/bootstrap.sh test"
  exit 77
}
need_python() {
  local modules
  modules=$(IFS=,; echo "$*")
  "$py" -c "import $modules" 2> /dev/null || python_env_missing "$py cannot import $modules"
}
need_file() { [ -s "$1" ] || python_env_missing "no $1"; }
