package account

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ReadPasswordLine reads one password from r: everything up to the first
// newline, without the line ending.
func ReadPasswordLine(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, MaxPasswordBytes+2), MaxPasswordBytes+2).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if errors.Is(err, io.EOF) && line == "" {
		return "", errors.New("account: no password on standard input")
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if len(line) > MaxPasswordBytes {
		return "", ErrLongPassword
	}
	return line, nil
}

// PromptNewPassword asks for a new password twice on a terminal, with echo
// off, and returns it when both entries match.
func PromptNewPassword(tty *os.File, prompt io.Writer, name string) (string, error) {
	var first, second string
	read := func(label string, into *string) error {
		fmt.Fprint(prompt, label)
		line, err := readHidden(tty)
		*into = line
		fmt.Fprintln(prompt)
		return err
	}
	if err := read("New password for "+name+": ", &first); err != nil {
		return "", err
	}
	if err := read("Repeat it: ", &second); err != nil {
		return "", err
	}
	if first != second {
		return "", errors.New("account: the two passwords differ")
	}
	return first, nil
}
