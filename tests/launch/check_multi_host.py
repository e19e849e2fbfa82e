#!/usr/bin/python3
"""tetra launch over two hosts: network namespaces with their own addresses,
joined by a veth link, are the hosts, and Open MPI starts ranks in them over
TCP (its remote agent a script that enters the namespace, as ssh would enter
the machine). A 4-rank job, 2 ranks per host, checkpoints every 4 steps:

  - host b is powered off once step 6 is logged: its processes are killed
    (SIGKILL) and the agent no longer reaches it; the supervisor finds b
    gone (as mpirun tells, or else by probing each host), drops it and goes
    on on host a (data 2);
  - host b's link is cut once step 6 is logged: the ranks on a time out
    (parallel.comm_timeout_s 10), naming b's ranks that did not answer their
    liveness probe; the supervisor ends the launcher (which waits for b's
    daemon forever), drops b and goes on on host a.

In both every step's loss equals an uninterrupted 4-rank run's within 1e-6.
Needs root and network namespaces (`ip netns`); where they are not allowed
the test says so and exits 77 (skipped).
usage: check_multi_host.py TETRA_BINARY
"""
import os
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


def run_case(check, work, name, fault, reference):
    metrics, ckpt = f"{work}/{name}.jsonl", f"{work}/{name}_ckpt"
    sets = SETS + [f"log.metrics_path={metrics}", f"checkpoint.dir={ckpt}"]
    command = [TETRA, "launch", "--np", "4", "--min-np", "2", "--hostfile", f"{work}/hostfile",
               "--max-restarts", "2", "--", "train", "--config", CONFIG]
    command += [arg for s in sets for arg in ("--set", s)]
    # Output to a file: processes left on a cut-off host may hold a pipe open for good.
    log = open(f"{work}/{name}.log", "w+")
    launch = subprocess.Popen(
        ["ip", "netns", "exec", "tetra_ha", "unshare", "--uts", "/bin/sh", "-c",
         'hostname ha; exec "$@"', "sh"] + command,
        env=launch_env(work), stdout=log, stderr=subprocess.STDOUT)
    faulted = False
    while launch.poll() is None and not faulted:
        if any(line.get("step", 0) >= 6 for line in metrics_so_far(metrics)):
            fault()
            faulted = True
        time.sleep(0.01)
    try:
        launch.wait(timeout=500)
    except subprocess.TimeoutExpired:
        launch.kill()
        launch.wait()
    log.seek(0)
    output = log.read()
    check(f"{name}: the launch finishes on host a", faulted and launch.returncode == 0, output[-4000:])
    events = [line for line in metrics_so_far(metrics) if "event" in line]
    check(f"{name}: one restart, going on with data 2",
          len(events) == 1 and events[0]["data"] == 2 and events[0]["world_size"] == 2, events)
    steps = [line for line in metrics_so_far(metrics) if "step" in line]
    got, want = [line["loss"] for line in steps], [line["loss"] for line in reference]
    worst = max((abs(a - b) for a, b in zip(got, want)), default=float("inf"))
    check(f"{name}: steps 1..{STEPS}, each loss within 1e-6 of the uninterrupted run's "
          f"(worst {worst:.2e})",
          [line["step"] for line in steps] == list(range(1, STEPS + 1)) and worst <= 1e-6)
    return output


def main():
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
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
            reference = f"{work}/reference.jsonl"
            run_tetra([TETRA, "train", "--config", CONFIG] +
                      [a for s in SETS + [f"log.metrics_path={reference}"] for a in ("--set", s)],
                      ranks=4)
            reference = metrics_so_far(reference)

            def power_off_host_b():  # its processes killed, and it answers no more
                open(f"{work}/tetra_hb.down", "w").close()
                for pid in processes_in("tetra_hb"):
                    os.kill(pid, signal.SIGKILL)

            output = run_case(check, work, "killed", power_off_host_b, reference)
            check("killed: the supervisor names host b", "lost host 10.77.0.2 (" in output,
                  output[-3000:])
            os.remove(f"{work}/tetra_hb.down")
            make_hosts()
            output = run_case(check, work, "cut", lambda: ip("-n", "tetra_hb", "link", "set",
                                                              "tetra_vb", "down"), reference)
            check("cut: the ranks on host a name host b's ranks, which did not answer",
                  "ranks 2, 3 on host hb did not answer a liveness probe" in output, output[-3000:])
    finally:
        remove_hosts()
    checker.exit("tetra launch survives a lost host and a cut link on the same loss curve")


if __name__ == "__main__":
    main()
