"""Who may tell an installation what to do, and how that is checked (on the model of ``celery/security/``).

* :mod:`.celery_signing` — Celery's ``auth`` serializer on every app: task messages are signed and only
  signed ones are taken;
* :mod:`.signatures` — the same keys signing what travels outside Celery (a run's inbox messages);
* :mod:`.trust` — which certificate each signing process uses and trusts, said at start, so a mismatch
  is named at once;
* :mod:`.tls` — TLS to the broker: which failures no retry mends, said in one line at start.
"""
