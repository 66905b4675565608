"""`python -m app` starts the Gradio app (see app.main for the environment variables)."""

from app.main import main

main()
