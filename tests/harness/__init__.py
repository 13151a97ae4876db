"""The test harness: what the tests and bench/ run around a loopback federation, never installed at a site.

federation.py: HarnessFederation, the loopback launcher (federation_tools.loopback) that can also start a server
whose admin server comes up late (slow_start.py) and a site run as its systemd unit runs it (as_service.py);
wan.py: sites behind an emulated WAN link, each in a network namespace of its own, with the userspace link emulator
(link_emulator.py) between them. Importable as `harness` where tests/ is on sys.path (pytest's `pythonpath`; the
bench scripts put it there). The modules that run as processes of their own are started by their file's path, so
the child needs none of the parent's sys.path.
"""
