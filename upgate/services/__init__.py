"""The one service layer every face (CLI, management API, console, dashboard) calls."""
