"""tracehound's Celery workers: ``celery -A workers worker -Q embed -c 1``."""

from workers.app import app

__all__ = ["app"]
