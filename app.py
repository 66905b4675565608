"""Hugging Face Spaces entry point (`app_file: app.py`): the same app as `python -m app`."""

from app.main import main

if __name__ == "__main__":
    main()
