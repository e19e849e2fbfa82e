#!/usr/bin/python3
"""tetra launch over two hosts: network namespaces with their own addresses,
joined by a veth link, are the hosts, and Open MPI starts ranks in them over
TCP (its remote agent a script that enters the namespace, as ssh would enter
the machine). A 4-rank job, 2 ranks per host, checkpoints every 4 steps:

  - host b is powered off once step 6 is logged: its processes are killed
    (SIGKILL), its memory is lost and the agent no longer reaches it; the
    supervisor finds b gone (as mpirun tells, or else by probing each host),
    drops it and goes on on host a (data 2), from the copy in memory
    (checkpoint.local_dir, every 2 steps; the file system's saves are 20
    steps apart) that host a keeps of b's ranks' state;
  - host b's link is cut once step 6 is logged: the ranks on a time out
    (parallel.comm_timeout_s 10), naming b's ranks that did not answer their
    liveness probe; the supervisor ends the launcher (which waits for b's
    daemon forever), drops b and goes on on host a.

  - with the hosts from a discovery script instead of a hostfile, host b
    powered off (and no longer listed), and back once the job has restarted
    (the script reads TETRA_LAUNCH_RESTARTS): the supervisor plans to go on
    on a, then, checking before it launches, grows the job back onto b
    (data 4), whose memory is empty: host a sends it the copy in memory.

In each every step's loss equals an uninterrupted 4-rank run's within 1e-6.
Needs root and network namespaces (`ip netns`); where they are not allowed
the test says so and exits 77 (skipped).
usage: check_multi_host.py TETRA_BINARY
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, Checker, metrics_so_far, run_tetra  # noqa: E402

TETRA = sys.argv[1]
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "tiny_dense.textproto")
STEPS = 40
SETS = ["train.micro_batch_size=2", f"train.steps={STEPS}", "train.threads=1",
        "log.interval=1000", "model.hidden_size=32", "model.intermediate_size=64",
        "parallel.comm_timeout_s=10", "checkpoint.interval=4"]
HOSTS = {"10.77.0.1": ("tetra_ha", "tetra_va", "ha"), "10.77.0.2": ("tetra_hb", "tetra_vb", "hb")}
AGENT = """#!/bin/sh
# Open MPI's remote agent: "HOST COMMAND..." runs COMMAND in HOST's namespace, as ssh would.
host="$1"; shift
case "$host" in
{cases}
  *) echo "no namespace for $host" >&2; exit 255 ;;
esac
# A host the test powered off answers no more, as ssh to it would not.
if [ -e "{work}/$ns.down" ]; then
  echo "ssh: connect to host $host port 22: No route to host" >&2
  exit 255
fi
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $name; $*"
"""


def ip(*args):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True)


def remove_hosts():
    for ns, _, _ in HOSTS.values():
        for pid in processes_in(ns):
            os.kill(pid, signal.SIGKILL)
        ip("netns", "del", ns)


def make_hosts():
    """The two namespaces and their link; the reason when not allowed."""
    remove_hosts()
    steps = [("netns", "add", ns) for ns, _, _ in HOSTS.values()]
    steps.append(("link", "add", "tetra_va", "type", "veth", "peer", "name", "tetra_vb"))
    for address, (ns, dev, _) in HOSTS.items():
        steps += [("link", "set", dev, "netns", ns), ("-n", ns, "addr", "add", f"{address}/24", "dev", dev),
                  ("-n", ns, "link", "set", dev, "up"), ("-n", ns, "link", "set", "lo", "up")]
    for step in steps:
        done = ip(*step)
        if done.returncode != 0:
            return f"ip {' '.join(step)}: {done.stderr.strip()}"
    return None


def net_namespace(ns):
    return subprocess.run(["ip", "netns", "exec", ns, "readlink", "/proc/self/ns/net"],
                          capture_output=True, text=True).stdout.strip()


def processes_in(ns):
    if not os.path.exists(f"/run/netns/{ns}"):
        return []
    mine, pids = net_namespace(ns), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mine and os.readlink(f"/proc/{pid}/ns/net") == mine and int(pid) != os.getpid():
                pids.append(int(pid))
        except OSError:
            pass
    return pids


# Host b, powered off (b_off), is back once the job has been restarted: the
# supervisor's discovery after the failure sees it gone, its check before the
# next launch sees it back, whatever the timing.
DISCOVER = """#!/bin/sh
if [ -e {work}/b_off ] && [ "${{TETRA_LAUNCH_RESTARTS:-0}}" -ge 1 ]; then
  rm -f {work}/b_off {work}/tetra_hb.down
fi
echo 10.77.0.1:2
[ -e {work}/b_off ] || echo 10.77.0.2:2
"""


def launch_env(work):
    agent = f"{work}/netns_agent"
    cases = "\n".join(f"  {a}) ns={ns}; name={name} ;;" for a, (ns, _, name) in HOSTS.items())
    with open(agent, "w") as f:
        f.write(AGENT.format(cases=cases, work=work))
    os.chmod(agent, 0o755)
    with open(f"{work}/hostfile", "w") as f:
        f.write("".join(f"{address} slots=2\n" for address in HOSTS))
    return dict(ENV, OMPI_MCA_plm_rsh_agent=agent, OMPI_MCA_btl="self,vader,tcp",
                OMPI_MCA_btl_tcp_if_include="10.77.0.0/24", OMPI_MCA_oob_tcp_if_include="10.77.0.0/24")


def reached_step(step):
    return lambda lines: any(line.get("step", 0) >= step for line in lines)


# Copies in memory: each host's under work/shm/HOST, lost with it. On the
# host-staged backend, which checks NCCL's rules: the copies' exchanges must
# keep them, as they must on GPUs.
IN_MEMORY = ["checkpoint.interval=20", "checkpoint.local_dir={work}/shm", "checkpoint.local_interval=2",
             "parallel.comm_backend=MPI"]


def run_case(check, work, name, script, reference, expected, discovery=False, in_memory=False):
    """Runs the 4-rank launch from host a; `script` holds (trigger, action)
    pairs done in order as the metrics reach each trigger; `expected` the
    restarts' (cause, data) in order. Returns the output and the restarts'
    metrics events."""
    metrics, ckpt = f"{work}/{name}.jsonl", f"{work}/{name}_ckpt"
    steps = len(reference)
    sets = SETS + [f"log.metrics_path={metrics}", f"checkpoint.dir={ckpt}"]
    sets += [s.format(work=work) for s in IN_MEMORY] if in_memory else []
    hosts = (["--host-discovery-script", f"{work}/discover", "--discovery-interval-s", "30"]
             if discovery else ["--hostfile", f"{work}/hostfile"])
    command = [TETRA, "launch", "--np", "4", "--min-np", "2"] + hosts + [
        "--max-restarts", "2", "--", "train", "--config", CONFIG]
    command += [arg for s in sets for arg in ("--set", s)]
    # Output to a file: processes left on a cut-off host may hold a pipe open for good.
    log = open(f"{work}/{name}.log", "w+")
    launch = subprocess.Popen(
        ["ip", "netns", "exec", "tetra_ha", "unshare", "--uts", "/bin/sh", "-c",
         'hostname ha; exec "$@"', "sh"] + command,
        env=launch_env(work), stdout=log, stderr=subprocess.STDOUT)
    pending = list(script)
    while launch.poll() is None and pending:
        if pending[0][0](metrics_so_far(metrics)):
            pending.pop(0)[1]()
        time.sleep(0.01)
    try:
        launch.wait(timeout=500)
    except subprocess.TimeoutExpired:
        launch.kill()
        launch.wait()
    log.seek(0)
    output = log.read()
    check(f"{name}: the launch finishes", not pending and launch.returncode == 0, output[-4000:])
    restarts = [line for line in metrics_so_far(metrics) if "event" in line]
    events = [(line["cause"], line["data"]) for line in restarts]
    check(f"{name}: restarts {expected}",
          len(events) == len(expected) and
          all(want in cause and data == want_data
              for (cause, data), (want, want_data) in zip(events, expected)),
          f"{events}\n{output[-3000:]}")
    logged = [line for line in metrics_so_far(metrics) if "step" in line]
    got, want = [line["loss"] for line in logged], [line["loss"] for line in reference]
    worst = max((abs(a - b) for a, b in zip(got, want)), default=float("inf"))
    check(f"{name}: steps 1..{steps}, each loss within 1e-6 of the uninterrupted run's "
          f"(worst {worst:.2e})",
          [line["step"] for line in logged] == list(range(1, steps + 1)) and worst <= 1e-6)
    return output, restarts


def main():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        print("SKIP: network namespaces need root, ip (iproute2) and unshare (util-linux)")
        sys.exit(77)
    why = make_hosts()
    if why:
        remove_hosts()
        print(f"SKIP: this machine does not allow network namespaces ({why})")
        sys.exit(77)
    checker = Checker()

    def check(what, ok, detail=""):
        checker(ok, what if ok else f"{what}\n{detail}")

    try:
        with tempfile.TemporaryDirectory() as work:
            def uninterrupted(name, sets):
                path = f"{work}/{name}.jsonl"
                run_tetra([TETRA, "train", "--config", CONFIG] +
                          [a for s in sets + [f"log.metrics_path={path}"] for a in ("--set", s)],
                          ranks=4)
                return metrics_so_far(path)

            reference = uninterrupted("reference", SETS)

            def power_off_host_b():  # its processes and memory gone, and it answers no more
                open(f"{work}/b_off", "w").close()
                open(f"{work}/tetra_hb.down", "w").close()
                for pid in processes_in("tetra_hb"):
                    os.kill(pid, signal.SIGKILL)
                shutil.rmtree(f"{work}/shm/hb", ignore_errors=True)

            lost_b = ("lost host 10.77.0.2 (", 2)
            output, restarts = run_case(check, work, "killed", [(reached_step(6), power_off_host_b)],
                                        reference, [lost_b], in_memory=True)
            check("killed: the supervisor names host b", "lost host 10.77.0.2 (" in output,
                  output[-3000:])
            resumed = [line["resumed_step"] for line in restarts]
            check(f"killed: host a resumes from its copy in memory of step 4 or later "
                  f"(resumed {resumed}; the file system's first save is at step 20)",
                  resumed and resumed[0] >= 4 and f"resumed from {work}/shm/ha/run-" in output,
                  output[-3000:])
            os.remove(f"{work}/b_off")
            os.remove(f"{work}/tetra_hb.down")
            make_hosts()
            cut_b = lambda: ip("-n", "tetra_hb", "link", "set", "tetra_vb", "down")  # noqa: E731
            output, _ = run_case(check, work, "cut", [(reached_step(6), cut_b)], reference,
                                 [("lost rank 2 on host hb", 2)])
            check("cut: the ranks on host a name host b's ranks, which did not answer",
                  "ranks 2, 3 on host hb did not answer a liveness probe" in output, output[-3000:])
            make_hosts()
            with open(f"{work}/discover", "w") as f:
                f.write(DISCOVER.format(work=work))
            os.chmod(f"{work}/discover", 0o755)
            output, _ = run_case(check, work, "back", [(reached_step(6), power_off_host_b)],
                                 reference, [lost_b, ("hosts came back: 10.77.0.2", 4)],
                                 discovery=True, in_memory=True)
            check("back: host b, back with empty memory, receives the copy in memory from host a",
                  "sent to host hb, which lacked them" in output and
                  f"resumed from {work}/shm/ha/run-" in output, output[-3000:])
    finally:
        remove_hosts()
    checker.exit("tetra launch survives a lost host and a cut link on the same loss curve")


if __name__ == "__main__":
    main()
