"""The rules that cut a rack's link in the kernel (link_cut=kernel), pure: what each fault becomes."""

import pytest

from chaos.kernel_link import KernelLinks, chains, cut, detour, dropped_bytes, ports_in_rules, redirect, reset_requests


def test_a_cut_drops_the_links_connections_both_ways_or_one():
    both = cut(8801, "both", "stormlab-lease-7")
    assert both == ["-p", "tcp", "-m", "conntrack", "--ctorigdstport", "8801",
                    "-m", "comment", "--comment", "stormlab-lease-7", "-j", "DROP"]  # fmt: skip
    assert cut(8801, "to-metadata", "l")[6:8] == ["--ctdir", "ORIGINAL"]  # the rack's packets to the service
    assert cut(8801, "from-metadata", "l")[6:8] == ["--ctdir", "REPLY"]  # the service's answers
    lossy = cut(8801, "both", "l", probability=0.25)
    assert lossy[lossy.index("--probability") + 1] == "0.250000" and "statistic" in lossy


def test_each_link_goes_on_to_its_cells_service():
    assert redirect(8801, ("127.0.0.1", 8700)) == [
        "-p", "tcp", "-d", "127.0.0.1", "--dport", "8801", "-j", "DNAT", "--to-destination", "127.0.0.1:8700",
    ]  # fmt: skip


def test_what_a_lease_dropped_is_read_from_its_rules_counters():
    listing = """Chain STORMLAB-CUT-8720 (1 references)
    pkts      bytes target     prot opt in     out     source               destination
      12      720 DROP       6    --  *      *       0.0.0.0/0            0.0.0.0/0            ctorigdstport 8801 /* stormlab-lease-3 */
       4      240 DROP       6    --  *      *       0.0.0.0/0            0.0.0.0/0            ctorigdstport 8802 /* stormlab-lease-3 */
       9      999 DROP       6    --  *      *       0.0.0.0/0            0.0.0.0/0            ctorigdstport 8803 /* stormlab-lease-31 */
"""
    assert dropped_bytes(listing, "stormlab-lease-3") == 960  # both of its racks, not lease 31's
    assert dropped_bytes(listing, "stormlab-lease-4") == 0


def test_the_ports_a_labs_rules_name_are_read_from_iptables_save():
    saved = """*nat
:STORMLAB-NAT-14065 - [0:0]
:DOCKER - [0:0]
-A OUTPUT -o lo -p tcp -j STORMLAB-NAT-14065
-A DOCKER -p tcp -m tcp --dport 9000 -j DNAT --to-destination 172.17.0.2:9000
-A STORMLAB-NAT-14065 -d 127.0.0.1/32 -p tcp -m tcp --dport 14074 -j DNAT --to-destination 127.0.0.1:14064
COMMIT
*filter
-A STORMLAB-CUT-14065 -p tcp -m conntrack --ctorigdstport 14075 -m comment --comment stormlab-lease-1 -j DROP
COMMIT
"""
    assert ports_in_rules(saved) == {14065, 14074, 14064, 14075}  # docker's 9000 is not a lab's


def test_a_labs_chains_are_its_own_and_fit_iptables():
    nat, cut_chain = chains("8720")
    assert (nat, cut_chain) == ("STORMLAB-NAT-8720", "STORMLAB-CUT-8720") and max(map(len, chains("65535"))) <= 28
    with pytest.raises(ValueError):
        KernelLinks("8720; reboot")


def test_a_lab_that_cannot_cut_in_the_kernel_says_why_and_starts_nothing(tmp_path, monkeypatch):
    from stormcore.errors import LabError
    from stormcore.settings import LabSettings
    from stormlab.engine import launcher

    monkeypatch.setattr(launcher, "available", lambda: "cutting links in the kernel needs root (iptables)")
    with pytest.raises(LabError, match="needs root"):
        launcher.up(LabSettings(link_cut="kernel"), base_port=0, directory=tmp_path / "lab")
    assert not (tmp_path / "lab").exists()  # nothing started, nothing written


def test_a_latency_detours_new_connections_to_the_proxy_and_resets_requests_on_the_kernels_ones():
    assert detour(8801) == ["-p", "tcp", "-d", "127.0.0.1", "--dport", "8801",
                            "-m", "comment", "--comment", "stormlab-detour-8801", "-j", "RETURN"]  # fmt: skip
    reset = reset_requests(8801)
    assert reset[4:6] == ["--ctstate", "DNAT"]  # the kernel's (redirected) connections, not the proxy's
    assert reset[reset.index("--ctdir") + 1] == "ORIGINAL"  # the rack's packets: its answers pass
    assert reset[reset.index("--length") + 1] == "53:65535"  # with a payload: its acknowledgements pass
    assert reset[-4:] == ["-j", "REJECT", "--reject-with", "tcp-reset"]
    assert dropped_bytes(f"9 999 REJECT /* {reset[-5]} */", "stormlab-lease-1") == 0  # not counted as a cut's


def test_the_launcher_chooses_who_carries_the_links_and_says_why():
    from stormcore.errors import LabError
    from stormcore.settings import LabSettings
    from stormlab.engine.launcher import choose_link_cut

    chosen, why = choose_link_cut(LabSettings(), None)  # auto, where the kernel may
    assert chosen.link_cut == "kernel" and "link_cut=auto: root" in why
    chosen, why = choose_link_cut(LabSettings(), "cutting links in the kernel needs root (iptables); run as root")
    assert chosen.link_cut == "proxy" and why.endswith("(link_cut=auto: cutting links in the kernel needs root (iptables))")
    assert choose_link_cut(LabSettings(link_cut="proxy"), None)[0].link_cut == "proxy"  # asked for, kept
    with pytest.raises(LabError, match="needs root"):
        choose_link_cut(LabSettings(link_cut="kernel"), "cutting links in the kernel needs root (iptables)")


def test_without_root_the_launcher_chooses_a_namespace_of_the_labs_own_where_it_may():
    from stormcore.errors import LabError
    from stormcore.settings import LabSettings
    from stormlab.engine.launcher import choose_link_cut

    not_root = "cutting links in the kernel needs root (iptables); run as root"
    chosen, why = choose_link_cut(LabSettings(), not_root, None)
    assert chosen.link_cut == "namespace" and "namespace of the lab's own" in why and "(link_cut=auto: not root)" in why
    chosen, why = choose_link_cut(LabSettings(), not_root, "no user and network namespace of the lab's own here")
    assert chosen.link_cut == "proxy" and "needs root (iptables); no user and network namespace" in why  # both reasons said
    assert choose_link_cut(LabSettings(), None, None)[0].link_cut == "kernel"  # root: the host's own kernel, no namespace
    assert choose_link_cut(LabSettings(link_cut="namespace"), None, None)[0].link_cut == "namespace"  # asked for, kept (even as root)
    with pytest.raises(LabError, match="link_cut=namespace: no user"):
        choose_link_cut(LabSettings(link_cut="namespace"), None, "no user and network namespace of the lab's own here")
