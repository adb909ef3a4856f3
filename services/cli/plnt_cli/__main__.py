from plnt_cli.main import main

main()
