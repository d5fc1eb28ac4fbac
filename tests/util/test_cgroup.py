"""The memory limit of a process's own cgroup (``util.cgroup``, decision 0182), on fake /proc and
cgroup trees: v1 and v2, the lowest limit from the process's cgroup up to the root, a container's
mount of its own sub-tree, and every way the files can be missing or wrong (which means no limit,
never an error).  The parsers are fuzzed."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from neuron_explorer.util import cgroup
from neuron_explorer.util.cgroup import (
    CgroupMemory,
    cgroup_dirs,
    memory_limit,
    parse_limit,
    parse_mountinfo,
    parse_proc_cgroup,
)
from tests.fuzzing import examples, seed

GIB = 1 << 30
HOST = 24 * GIB
V1_MOUNT = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
V2_MOUNT = "41 31 0:38 / /sys/fs/cgroup rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
OTHER = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"


def _tree(tmp: Path, proc_cgroup: str, mountinfo: str, files: dict[str, str | bytes], pid: int = 42) -> Path:
    """A fake root: /proc/<pid>/cgroup, /proc/self/mountinfo and the cgroup files given by path."""
    (tmp / "proc" / str(pid)).mkdir(parents=True)
    (tmp / "proc" / "self").mkdir()
    (tmp / "proc" / str(pid) / "cgroup").write_text(proc_cgroup)
    (tmp / "proc" / "self" / "mountinfo").write_text(mountinfo)
    for rel, content in files.items():
        f = tmp / rel.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content.encode() if isinstance(content, str) else content)
    return tmp


def test_limit_text_is_a_positive_int64_or_nothing():
    assert parse_limit("3221225472\n") == 3 * GIB
    assert parse_limit(b" 4096 ") == 4096
    for bad in ("max\n", "", "\n", "-1", "+5", "0", "1.5", "12k", "9223372036854775808", "9" * 25, "１２", None,
                b"\xff\xfe", "1 2"):
        assert parse_limit(bad) is None, bad
    assert parse_limit(str(cgroup.INT64_MAX)) == cgroup.INT64_MAX


def test_proc_cgroup_names_the_v1_memory_hierarchy_and_the_v2_one():
    text = "12:cpu,cpuacct:/a\n4:memory:/process_api/x\n1:name=systemd:/s\n0::/user.slice/u\n"
    assert parse_proc_cgroup(text) == {"v1": "/process_api/x", "v2": "/user.slice/u"}
    assert parse_proc_cgroup("0::/\n") == {"v2": "/"}
    assert parse_proc_cgroup("garbage\n3:memory:relative\n5:memory\n") == {}


def test_mountinfo_lists_v1_memory_and_v2_mounts_with_their_roots():
    text = V1_MOUNT + OTHER + "50 31 0:40 /docker/abc /mnt/my\\040cg rw - cgroup2 cgroup2 rw\nshort line\n"
    assert parse_mountinfo(text) == [("v1", "/", "/sys/fs/cgroup/memory"), ("v2", "/docker/abc", "/mnt/my cg")]


def test_directories_run_from_the_cgroup_up_to_the_mount_and_stay_inside_it():
    assert cgroup_dirs("/a/b", "/", "/m") == [("/m/a/b", "/a/b"), ("/m/a", "/a"), ("/m", "/")]
    # a container's mount of its own sub-tree: /docker/abc is the mount's top
    assert cgroup_dirs("/docker/abc/job", "/docker/abc", "/sys/fs/cgroup") == [
        ("/sys/fs/cgroup/job", "/docker/abc/job"), ("/sys/fs/cgroup", "/docker/abc")]
    assert cgroup_dirs("/other", "/docker/abc", "/m") == []  # not below the mount's root
    assert cgroup_dirs("/../../x", "/", "/m") == []  # another namespace's view
    assert len(cgroup_dirs("/a" * 500, "/", "/m")) == cgroup.MAX_DEPTH + 1


def test_v1_the_lowest_limit_from_the_process_up_is_taken_with_its_cgroup(tmp_path):
    root = _tree(tmp_path, "4:memory:/jobs/j1\n0::/\n", V1_MOUNT + OTHER, {
        "/sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes": "9223372036854771712\n",  # none of its own
        "/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes": f"{3 * GIB}\n",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"})
    lim = memory_limit(42, HOST, prefix=str(root))
    assert lim == cgroup.Limit(3 * GIB, "cgroup v1 memory.limit_in_bytes", "/jobs")


def test_v2_memory_max_and_max_meaning_none(tmp_path):
    root = _tree(tmp_path, "0::/kubepods/pod1/c1\n", V2_MOUNT, {
        "/sys/fs/cgroup/kubepods/pod1/c1/memory.max": f"{2 * GIB}\n",
        "/sys/fs/cgroup/kubepods/pod1/memory.max": f"{4 * GIB}\n",
        "/sys/fs/cgroup/kubepods/memory.max": "max\n"})
    want = cgroup.Limit(2 * GIB, "cgroup v2 memory.max", "/kubepods/pod1/c1")
    assert memory_limit(42, HOST, prefix=str(root)) == want


def test_a_limit_at_or_above_the_hosts_memory_or_none_at_all_is_no_limit(tmp_path):
    root = _tree(tmp_path, "0::/c\n", V2_MOUNT, {"/sys/fs/cgroup/c/memory.max": f"{HOST}\n"})
    assert memory_limit(42, HOST, prefix=str(root)) is None
    assert memory_limit(42, 0, prefix=str(root)) == cgroup.Limit(HOST, "cgroup v2 memory.max", "/c")  # host unknown
    root2 = _tree(tmp_path / "2", "0::/c\n", V2_MOUNT, {"/sys/fs/cgroup/c/memory.max": "max\n"})
    assert memory_limit(42, HOST, prefix=str(root2)) is None


def test_missing_unreadable_or_strange_files_mean_no_limit_and_never_an_error(tmp_path):
    assert memory_limit(42, HOST, prefix=str(tmp_path / "nothing")) is None  # no /proc at all
    root = _tree(tmp_path / "a", "4:memory:/x/y\n", V1_MOUNT, {
        "/sys/fs/cgroup/memory/x/memory.limit_in_bytes": "garbage\n"})
    (root / "sys/fs/cgroup/memory/x/y").mkdir()
    (root / "sys/fs/cgroup/memory/x/y/memory.limit_in_bytes").mkdir()  # a directory
    os.mkfifo(root / "sys/fs/cgroup/memory/memory.limit_in_bytes")  # a FIFO: never opened
    assert memory_limit(42, HOST, prefix=str(root)) is None
    big = _tree(tmp_path / "b", "0::/c\n", V2_MOUNT, {"/sys/fs/cgroup/c/memory.max": "1" * 10_000})
    assert memory_limit(42, HOST, prefix=str(big)) is None
    if os.geteuid() != 0:  # root reads a mode-000 file
        f = _tree(tmp_path / "c", "0::/c\n", V2_MOUNT, {"/sys/fs/cgroup/c/memory.max": "4096\n"})
        (f / "sys/fs/cgroup/c/memory.max").chmod(0)
        assert memory_limit(42, HOST, prefix=str(f)) is None


def test_the_files_are_found_once_and_read_again_each_time(tmp_path):
    root = _tree(tmp_path, "0::/c\n", V2_MOUNT, {"/sys/fs/cgroup/c/memory.max": f"{GIB}\n"})
    cm = CgroupMemory.find(42, prefix=str(root))
    assert cm.read().bytes == GIB
    (root / "sys/fs/cgroup/c/memory.max").write_text(f"{2 * GIB}\n")  # `docker update --memory`
    assert cm.read().bytes == 2 * GIB
    (root / "sys/fs/cgroup/c/memory.max").unlink()
    assert cm.read() is None


def test_this_machine_answers_without_error():
    lim = memory_limit("self", HOST)
    assert lim is None or (0 < lim.bytes < HOST and lim.source in cgroup.SOURCES.values())


def _garbage(rnd: random.Random) -> bytes:
    pick = rnd.randrange(6)
    if pick == 0:
        return bytes(rnd.randrange(256) for _ in range(rnd.randrange(64)))
    if pick == 1:
        return rnd.choice([b"max", b"0", b"-1", b"18446744073709551615", b"9223372036854775807", b"1e9", b""]) + b"\n"
    if pick == 2:
        return str(rnd.randrange(1, 1 << 64)).encode() + rnd.choice([b"", b"\n", b" \n", b"\x00"])
    if pick == 3:
        return rnd.choice(["0::", "4:memory:", "x:memory,cpu:", "0::/..", ""]).encode() + \
            "/".join(rnd.choice(["a", "..", ".", "", "b c", "\\040"]) for _ in range(rnd.randrange(8))).encode()
    if pick == 4:
        return " ".join(rnd.choice(["35", "31", "0:32", "/", "/sys/fs/cgroup", "-", "cgroup", "cgroup2", "rw,memory",
                                    "/a", "\\040", ""]) for _ in range(rnd.randrange(14))).encode()
    return os.urandom(rnd.randrange(200))


def test_fuzz_the_parsers_never_raise_and_answer_in_range():
    rnd = random.Random(seed(182))
    for i in range(examples(3000)):
        raw = _garbage(rnd)
        text = raw.decode("utf-8", "replace")
        v = parse_limit(raw if i % 2 else text)
        assert v is None or 0 < v <= cgroup.INT64_MAX, (i, raw)
        parsed = parse_proc_cgroup(text)
        assert set(parsed) <= {"v1", "v2"} and all(p.startswith("/") for p in parsed.values()), (i, raw)
        for kind, r, point in parse_mountinfo(text):
            assert kind in ("v1", "v2") and r.startswith("/") and point.startswith("/"), (i, raw)
            for d, _ in cgroup_dirs(rnd.choice(["/", "/a/b", text]), r, point):
                assert os.path.normpath(d).startswith(os.path.normpath(point)), (i, raw, d)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_fuzz_whole_trees_of_damaged_files_give_a_limit_below_the_host_or_none(tmp_path, version):
    """Each example writes random or damaged contents into /proc/<pid>/cgroup, mountinfo and the
    limit files of a three-level tree (or leaves some out), then reads the limit."""
    rnd = random.Random(seed(1820 + (version == "v2")))
    name = "memory.max" if version == "v2" else "memory.limit_in_bytes"
    good_cg = "0::/a/b\n" if version == "v2" else "4:memory:/a/b\n"
    good_mi = V2_MOUNT if version == "v2" else V1_MOUNT
    point = "/sys/fs/cgroup" if version == "v2" else "/sys/fs/cgroup/memory"
    for i in range(examples(150)):
        files: dict[str, str | bytes] = {}
        for d in ("/a/b", "/a", ""):
            if rnd.random() < 0.8:
                files[f"{point}{d}/{name}"] = _garbage(rnd) if rnd.random() < 0.5 else f"{rnd.randrange(1, 2 * HOST)}\n"
        cg = good_cg if rnd.random() < 0.7 else _garbage(rnd).decode("utf-8", "replace")
        mi = good_mi if rnd.random() < 0.7 else _garbage(rnd).decode("utf-8", "replace")
        root = _tree(tmp_path / str(i), cg, mi, files)
        lim = memory_limit(42, HOST, prefix=str(root))
        assert lim is None or (0 < lim.bytes < HOST and lim.source in cgroup.SOURCES.values()), (i, lim)
        if lim is not None and cg == good_cg and mi == good_mi:
            want = min(v for f, c in files.items() if (v := parse_limit(c)) is not None)
            assert lim.bytes == want, (i, files, lim)


# ---- what several processes can hold together (the monitor's device memory size, decision 0186)

V1, V2 = cgroup.V1_FILE, cgroup.V2_FILE


def _chain(name: str, *levels: tuple[str, int | None]) -> list[cgroup.Level]:
    return [(name, cg, v) for cg, v in levels]


def test_shared_limit_of_one_process_is_its_lowest_level_and_of_one_cgroup_counts_it_once():
    a = _chain(V1, ("/jobs/a", None), ("/jobs", 3 * GIB), ("/", None))
    assert cgroup.shared_limit([a]) == cgroup.Limit(3 * GIB, "cgroup v1 memory.limit_in_bytes", "/jobs")
    assert cgroup.shared_limit([a, a, list(a)]) == cgroup.shared_limit([a])


def test_shared_limit_adds_sibling_cgroups_up_to_the_parent_that_binds_them():
    a = _chain(V2, ("/pods/a", GIB), ("/pods", None), ("/", None))
    b = _chain(V2, ("/pods/b", 2 * GIB), ("/pods", None), ("/", None))
    assert cgroup.shared_limit([a, b]) == cgroup.Limit(3 * GIB, "cgroup v2 memory.max", "/pods/a,/pods/b")
    tight = [[(n, cg, 2 * GIB if cg == "/pods" else v) for n, cg, v in c] for c in (a, b)]
    assert cgroup.shared_limit(tight) == cgroup.Limit(2 * GIB, "cgroup v2 memory.max", "/pods")
    # a process in the parent itself is bound by the parent's limit alone
    p = _chain(V2, ("/pods", 5 * GIB), ("/", None))
    assert cgroup.shared_limit([a, p]).bytes == 5 * GIB
    # a process under no limit: the processes together are not bounded by the cgroups
    free = _chain(V2, ("/pods/c", None), ("/pods", None), ("/", None))
    assert cgroup.shared_limit([a, free]) is None
    assert cgroup.shared_limit([a, []]) is None  # a process whose cgroups could not be found
    assert cgroup.shared_limit([]) is None


def test_shared_limit_with_both_hierarchies_takes_the_lower_figure():
    a = _chain(V1, ("/a", 4 * GIB), ("/", None)) + _chain(V2, ("/x", 3 * GIB), ("/", None))
    b = _chain(V1, ("/b", 4 * GIB), ("/", None)) + _chain(V2, ("/x", 3 * GIB), ("/", None))
    assert cgroup.shared_limit([a, b]) == cgroup.Limit(3 * GIB, "cgroup v2 memory.max", "/x")


def test_shared_limit_from_real_levels_of_a_fake_tree(tmp_path):
    root = _tree(tmp_path, "0::/pods/a\n", V2_MOUNT, {
        "/sys/fs/cgroup/pods/a/memory.max": f"{GIB}\n", "/sys/fs/cgroup/pods/b/memory.max": f"{2 * GIB}\n",
        "/sys/fs/cgroup/pods/memory.max": "max\n"})
    (root / "proc" / "43").mkdir()
    (root / "proc" / "43" / "cgroup").write_text("0::/pods/b\n")
    seen: dict = {}
    chains = [CgroupMemory.find(pid, prefix=str(root)).levels(seen) for pid in (42, 43)]
    assert len(seen) == 4  # /pods and / read once for both
    assert cgroup.shared_limit(chains).bytes == 3 * GIB


def test_fuzz_shared_limit_never_raises_and_stays_within_the_sum_of_the_lowest_levels():
    rnd = random.Random(seed(186))
    names = ["/", "/a", "/a/b", "/a/c", "/d", "/a/b/e", "", "/a/../x"]
    for i in range(examples(3000)):
        # a cgroup has one limit (levels() reads each file once per round), chains in any shape
        lim = {(k, n): rnd.choice([None, rnd.randrange(1, 1 << 40), cgroup.INT64_MAX]) for k in (V1, V2) for n in names}
        chains = []
        for _ in range(rnd.randrange(5)):
            chain = []
            if rnd.random() < 0.5:  # a well-formed chain: a cgroup and its ancestors, per hierarchy
                leaf = rnd.choice(names[:6])
                for k in rnd.sample([V1, V2], rnd.randrange(1, 3)):
                    ups = [leaf]
                    while ups[-1] != "/":
                        ups.append(os.path.dirname(ups[-1]))
                    chain += [(k, n, lim[k, n]) for n in ups]
            for _ in range(rnd.randrange(6 if not chain else 2)):
                k, n = rnd.choice([V1, V2]), rnd.choice(names)
                chain.append((k, n, lim[k, n]))
            chains.append(chain)
        got = cgroup.shared_limit(chains)
        if got is None:
            continue
        assert got.bytes > 0 and got.source in cgroup.SOURCES.values(), (i, chains, got)
        # never more than every process at its own lowest limit in the hierarchy that answered
        kind = next(n for n, src in cgroup.SOURCES.items() if src == got.source)
        lows = [min((v for n, _, v in c if n == kind and v is not None), default=None) for c in chains]
        assert all(x is not None for x in lows) and got.bytes <= sum(lows), (i, chains, got)  # type: ignore[arg-type]
        assert set(got.cgroup.split(",")) <= {cg for c in chains for _, cg, _ in c}, (i, chains, got)
