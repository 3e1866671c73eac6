package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/reveal"
)

const userUsage = `usage:
  console user add NAME --role operator|auditor|admin [--password-stdin] [--data DIR]
  console user list [--data DIR]
  console user disable NAME [--data DIR]
  console user passwd [NAME] [--password-stdin] [--data DIR]
      without NAME, or with your own: sets the password of the account named
      like you ($USER); for another account: sets it, ends its sessions, and
      it must choose its own at its next login`

// cmdUser manages console accounts. Passwords are asked for twice on the
// terminal, or read from the first line of standard input with
// --password-stdin; they are stored only as argon2id hashes.
func cmdUser(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, userUsage)
		return 2
	}
	if isHelp(args[0]) {
		fmt.Fprintln(e.stderr, userUsage)
		return 0
	}
	fs := flag.NewFlagSet("user "+args[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	withUsage(fs, e, userUsage)
	data := fs.String("data", "", "data directory (default $COUNTERSIGN_DATA or ./countersign-data)")
	dbURL := dbFlag(fs)
	var role string
	var fromStdin bool
	if args[0] == "add" {
		fs.StringVar(&role, "role", "", "operator, auditor or admin")
	}
	if args[0] == "add" || args[0] == "passwd" {
		fs.BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of standard input")
	}
	names, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	switch args[0] {
	case "add":
		if len(names) != 1 || role == "" {
			fmt.Fprintln(e.stderr, userUsage)
			return 2
		}
		// Before the password is asked for: a mistyped --data is refused
		// rather than made.
		if err := setupDirMissing(e, *data); err != nil {
			fmt.Fprintf(e.stderr, "console user add: %v\n", err)
			return 1
		}
		return userAdd(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), names[0], role, fromStdin)
	case "list":
		if len(names) != 0 {
			fmt.Fprintln(e.stderr, userUsage)
			return 2
		}
		return userList(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL))
	case "disable":
		if len(names) != 1 {
			fmt.Fprintln(e.stderr, userUsage)
			return 2
		}
		return userDisable(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), names[0])
	case "passwd":
		if len(names) > 1 {
			fmt.Fprintln(e.stderr, userUsage)
			return 2
		}
		name, self := e.getenv("USER"), true
		if len(names) == 1 && names[0] != name {
			name, self = names[0], false
		}
		if name == "" {
			fmt.Fprintln(e.stderr, "console user passwd: $USER is not set: name the account (console user list shows them)")
			return 2
		}
		return userPasswd(ctx, e, dataDir(e, *data), databaseURL(e, *dbURL), name, self, fromStdin)
	}
	fmt.Fprintf(e.stderr, "console user: unknown subcommand %q (add, list, disable, passwd)\n\n%s\n", args[0], userUsage)
	return 2
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (console user add alice --role operator).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func userAdd(ctx context.Context, e *env, data, url, name, roleName string, fromStdin bool) int {
	if err := account.CheckName(name); err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 2
	}
	role, err := account.ParseRole(roleName)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 2
	}
	var password string
	switch tty, isFile := e.stdin.(*os.File); {
	case fromStdin:
		password, err = account.ReadPasswordLine(e.stdin)
	case isFile && account.IsTerminal(tty):
		password, err = account.PromptNewPassword(tty, e.stderr, name)
	default:
		err = errors.New("standard input is not a terminal: pass --password-stdin and the password on its first line")
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 2
	}
	if err := account.CheckPassword(password); err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 2
	}
	hash, err := account.Hash(password)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 1
	}
	d, err := openStore(ctx, data, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v\n", err)
		return 1
	}
	defer d.Close()
	if _, err := accountsOf(d).AddUser(ctx, name, role, hash, cliPrincipal(e), audit.ChannelCLI); err != nil {
		fmt.Fprintf(e.stderr, "console user add: %v%s\n", err, userHint(err))
		return 1
	}
	fmt.Fprintf(e.stdout, "added %s (%s)\n", name, role)
	return 0
}

// readNewPassword asks for a new password twice on the terminal, or reads
// it from the first line of standard input with --password-stdin, and
// checks it.
func readNewPassword(e *env, name string, fromStdin bool) (string, error) {
	var password string
	var err error
	switch tty, isFile := e.stdin.(*os.File); {
	case fromStdin:
		password, err = account.ReadPasswordLine(e.stdin)
	case isFile && account.IsTerminal(tty):
		password, err = account.PromptNewPassword(tty, e.stderr, name)
	default:
		err = errors.New("standard input is not a terminal: pass --password-stdin and the password on its first line")
	}
	if err != nil {
		return "", err
	}
	return password, account.CheckPassword(password)
}

// userPasswd sets an account's password. Set for oneself it is simply the
// new password; set for another account, that account's sessions end and
// it must choose its own password at its next login.
func userPasswd(ctx context.Context, e *env, data, url, name string, self, fromStdin bool) int {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user passwd: %v\n", err)
		return 1
	}
	defer d.Close()
	accounts := accountsOf(d)
	// Before the password is asked for: an unknown or single-sign-on
	// account is refused at once.
	u, err := accounts.UserByName(ctx, name)
	if err == nil && u.SSO() {
		err = account.ErrSSOPassword
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "console user passwd: %v%s\n", err, userHint(err))
		return 1
	}
	password, err := readNewPassword(e, name, fromStdin)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user passwd: %v\n", err)
		return 2
	}
	hash, err := account.Hash(password)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user passwd: %v\n", err)
		return 1
	}
	ended, err := accounts.SetPassword(ctx, name, hash, self, cliPrincipal(e), audit.ChannelCLI)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user passwd: %v%s\n", err, userHint(err))
		return 1
	}
	if self {
		fmt.Fprintf(e.stdout, "set the password of %s\n", reveal.String(name))
		return 0
	}
	fmt.Fprintf(e.stdout, "set the password of %s: they must choose their own at their next login; sessions ended: %d (open pages close within seconds)\n", reveal.String(name), ended)
	return 0
}

func userList(ctx context.Context, e *env, data, url string) int {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user list: %v\n", err)
		return 1
	}
	defer d.Close()
	users, err := accountsOf(d).Users(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user list: %v\n", err)
		return 1
	}
	w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tROLE\tCREATED\tDISABLED")
	for _, u := range users {
		disabled := "-"
		if u.Disabled() {
			disabled = u.DisabledAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", reveal.String(u.Name), u.Role, u.CreatedAt.Format(time.RFC3339), disabled)
	}
	w.Flush()
	return 0
}

func userDisable(ctx context.Context, e *env, data, url, name string) int {
	d, err := openExisting(ctx, data, url)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user disable: %v\n", err)
		return 1
	}
	defer d.Close()
	ended, err := queue.NewService(queue.Config{Store: d.queue}).DisableAccount(ctx, accountsOf(d), name, cliPrincipal(e), audit.ChannelCLI)
	if err != nil {
		fmt.Fprintf(e.stderr, "console user disable: %v%s\n", err, userHint(err))
		return 1
	}
	fmt.Fprintf(e.stdout, "disabled %s; their console sessions have ended (open pages close within seconds); %d delegations they gave or received are recorded ended\n", name, ended)
	return 0
}

// userHint is what to do next after an account error, for the shell.
func userHint(err error) string {
	switch {
	case errors.Is(err, account.ErrUserExists):
		return " (console user list shows the accounts; a disabled account keeps its name: choose another)"
	case errors.Is(err, account.ErrUserNotFound):
		return " (console user list shows the accounts; is --data the console's data directory?)"
	case errors.Is(err, account.ErrSSOPassword):
		return " (change it at the provider; console user disable or Admin → End sessions stop the account here)"
	}
	return ""
}
