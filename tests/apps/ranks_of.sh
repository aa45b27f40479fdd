# ranks_of PID NAME: the processes named NAME among PID's descendants (a launcher's ranks:
# Open MPI's mpiexec starts them as its children, MPICH's Hydra under a proxy process).
ranks_of() {
  local child
  for child in $(ps -o pid= --ppid "$1"); do
    if [ "$(ps -o comm= -p "$child")" = "${2:0:15}" ]; then  # comm: the first 15 characters
      echo "$child"
    else
      ranks_of "$child" "$2"
    fi
  done
}
