from admin_cli.main import main

main()
