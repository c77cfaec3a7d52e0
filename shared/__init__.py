"""What the pools, the CLI and the producers share, in four layers (each imports only the ones below):

* ``ragline.shared.stack``: the embedded stack (Postgres, Redis, the worker processes): the CLI's;
* ``ragline.shared.worker``: the worker runtime (Celery app, task base, database, migrations,
  providers, metrics, logging, redelivery);
* ``ragline.shared.sdk``: what a producer needs (client, async client, answer stream, contracts,
  names, signing); the base install, ``import ragline``;
* ``ragline.shared.config``: the settings and the embedded stack's ``runtime.json``.

The modules were once all in this folder; their old names were removed in 0.2 (docs/upgrading.md
lists each with its new one).
"""
