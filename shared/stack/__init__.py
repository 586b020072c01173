"""The stack on one machine without Docker: ``tracehound up`` and ``down`` (up.py), the
supervisor that keeps its children running (supervisor.py), the state file every other command
finds it by (stackfile.py), and how each process starts (localstack.py), which the demo, the
benchmarks and the tests start their stacks with too.
"""
