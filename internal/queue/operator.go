package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/present"
	"github.com/countersign/countersign/internal/tools"
)

// ErrNotApprovableFrom refuses an approval through a channel the call's
// tool does not list in approve_from.
var ErrNotApprovableFrom = errors.New("queue: this tool's calls are not approved through this channel")

// NotApprovableFromError names the channels the tool's calls are approved
// through.
type NotApprovableFromError struct {
	Tool, Channel string
	Allowed       []string
}

func (e *NotApprovableFromError) Error() string {
	return fmt.Sprintf("queue: %s is approved only through %s, not %s", e.Tool, strings.Join(e.Allowed, ", "), e.Channel)
}

func (e *NotApprovableFromError) Unwrap() error { return ErrNotApprovableFrom }

// approvableFrom refuses an approval of c through channel when c's tool
// lists the channels it is approved through (approve_from) and channel is
// not among them.
func approvableFrom(reg *tools.Registry, c *Call, channel string) error {
	if reg == nil {
		return nil
	}
	t, ok := reg.Tool(c.Tool)
	if !ok || t.ApprovableFrom(channel) {
		return nil
	}
	return &NotApprovableFromError{Tool: c.Tool, Channel: channel, Allowed: append([]string(nil), t.ApproveFrom...)}
}

// ErrListing refuses an approval through the operator API that does not
// name a listing of this call, with this digest, made for this person in
// the last MaxListingAge.
var ErrListing = errors.New("queue: the approval does not name a recent listing of this call and digest made for you; list the queue again and approve with the call's listing token")

// MaxListingAge is how long a listing token of the operator API's queue
// listing may be used to approve.
const MaxListingAge = 10 * time.Minute

// ListingToken is the token the operator API's queue listing gives call c
// for viewer (present.PageListing): an approval through the API carries it
// to name the call and digest it listed. "" when the service checks no
// listings.
func (s *Service) ListingToken(viewer string, c *Call) string {
	return s.listingToken(viewer, callItem(c))
}

// listingToken is a listing of items made now for viewer.
func (s *Service) listingToken(viewer string, items []present.Item) string {
	if s.present == nil {
		return ""
	}
	return s.present.Token(present.Shown{Page: present.PageListing, Viewer: viewer, At: s.now(), Items: items})
}

func callItem(c *Call) []present.Item { return []present.Item{{CallID: c.ID, Digest: c.Digest}} }

// checkListed requires a decision through the operator API to carry a
// listing token of items (a call and its digest, or a plan's items and
// digest) made for operator within MaxListingAge; other channels carry
// none.
func (s *Service) checkListed(channel, token, operator string, items []present.Item, now time.Time) error {
	if channel != audit.ChannelAPI {
		if token != "" {
			return fmt.Errorf("%w (a listing token is for the operator API only)", ErrListing)
		}
		return nil
	}
	if s.present == nil {
		return fmt.Errorf("%w (this console checks no listings)", ErrListing)
	}
	if _, err := s.present.Check(token, present.PageListing, operator, items, now, MaxListingAge); err != nil {
		return fmt.Errorf("%w (%w)", ErrListing, err)
	}
	return nil
}
