"""``use_broker`` repoints a Celery app that was already used: nothing keeps the old URL."""

from ragline.shared.worker.celery_app import app, use_broker


def test_a_backend_built_for_another_url_is_dropped():
    before = app.conf.broker_url
    try:
        use_broker("redis://127.0.0.1:6390/0")
        first = app.backend  # built and cached on first use
        assert first.connparams["port"] == 6390
        with app.pool.acquire(block=False) as conn:
            assert ":6390" in conn.as_uri()
        use_broker("redis://127.0.0.1:6391/0")
        assert app.backend is not first and app.backend.connparams["port"] == 6391
        with app.pool.acquire(block=False) as conn:
            assert ":6391" in conn.as_uri()
        kept = app.backend
        use_broker("redis://127.0.0.1:6391/0")  # the same URL again: nothing rebuilt
        assert app.backend is kept
    finally:
        use_broker(before)
