"""Deploying a profile to hosts: the plan as data, the unit, the transaction that runs it, rollback,
probe, import, rollouts behind the gateway and multi-node launches."""
