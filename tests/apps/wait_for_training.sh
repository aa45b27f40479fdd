# wait_for_training LOG: returns once the dtrain-gpt run logging to LOG trains (its set-up
# logs the peak just before the loop, its signal handlers in place), at most 60 s; 1 if it
# never does.
wait_for_training() {
  local _
  for _ in $(seq 600); do
    grep -q "peak:" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
