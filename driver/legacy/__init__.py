"""The legacy shim for clusters without DRA: the kubelet device plugin (v1beta1) and the scheduler extender.

docs/legacy.md describes it; `carve device-plugin` (command.py) and `carve scheduler-extender`
(extender/command.py) run it.
"""
