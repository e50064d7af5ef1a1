"""Warm starts for the processes pytest-aoti owns.

A fresh interpreter's first AOTI compile pays for being new: importing torch, Inductor and pytest, and Inductor's CPU
vector-ISA probes (one build and one Python per ISA; docs/benchmarks.md#inductors-isa-probes). The fork
server (:mod:`~pytest_aoti.forkserver.server`) pays that once per session, never touching CUDA, and forks each debug
stage and isolated test from there (:mod:`~pytest_aoti.forkserver.client`). A forked child is still a process of its
own: its crash, environment, cwd, stdio and exit status are its own, it imports the user's code afresh, and the
reproduce line the report shows stays a plain command for a fresh interpreter.
"""
