package console

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/passkey"
	"github.com/countersign/countersign/internal/problem"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

// Approving with a passkey: the call page's button posts the approve form
// to /calls/:id/passkey/begin, which checks what a click would (the digest
// shown, the typed confirmation, the acknowledged warning, who may approve)
// and answers the options of navigator.credentials.get, whose challenge is
// bound to this call, its digest and this operator. The browser's answer
// goes to /finish, where internal/passkey verifies it (user verification,
// the challenge, the signature with the stored key, the counter) against
// the call as it stands now, and the queue records the approval with its
// evidence in the decision's transaction, exactly as a click would be.

// decisionJSON answers a refused decision of a passkey endpoint in the
// API's error shape, with the status the refusal carries.
func decisionJSON(ec echo.Context, err error) error {
	if errors.Is(err, queue.ErrNotFound) {
		return jsonError(ec, http.StatusNotFound, "not_found", "no such call")
	}
	var ae *problem.Error
	if !errors.As(err, &ae) {
		ae = server.ErrorOf(err)
	}
	if ae.Status >= 500 {
		return err
	}
	return jsonError(ec, ae.Status, ae.Code, ae.Message)
}

// passkeyPrecheck refuses early what the queue would refuse at the end, so
// that nobody is asked to touch their authenticator for nothing. The queue
// checks it all again inside the decision's transaction.
func (c *Console) passkeyPrecheck(call *queue.Call, v *viewer, digest, behalf string) error {
	switch {
	case call.Status != queue.StatusPending:
		return queue.ErrNotPending
	case digest != call.Digest:
		return queue.ErrDigestMismatch
	case call.ProposedBy(v.user):
		return queue.ErrOwnCall
	case call.OwnedBy(v.user) != "":
		return &queue.OwnerError{Operator: v.user.Name, Owner: call.OwnedBy(v.user)}
	case behalf == "" && !call.Approvers.Allows(string(v.user.Role), v.user.Groups):
		// Approving for a delegator is judged by the delegator's
		// standing, which the queue reads in the decision.
		return &queue.ApproversError{Operator: v.user.Name, Who: call.Approvers.Describe()}
	case behalf != "" && call.ApprovedBy(behalf):
		return queue.ErrAlreadyApproved
	case call.ApprovedBy(v.user.Name):
		return queue.ErrAlreadyApproved
	}
	return nil
}

func (c *Console) beginPasskeyApproval(ec echo.Context) error {
	if c.cfg.Passkeys == nil {
		return jsonError(ec, http.StatusNotFound, "passkeys_off", "passkeys are not available on this console")
	}
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return decisionJSON(ec, err)
	}
	digest := strings.TrimSpace(form.Get("digest"))
	if err := c.passkeyPrecheck(call, v, digest, form.Get("for")); err != nil {
		return decisionJSON(ec, err)
	}
	if err := c.confirmation(call, form); err != nil {
		return decisionJSON(ec, err)
	}
	pu, _, err := c.passkeyUser(ctx, v.user)
	if err != nil {
		return err
	}
	opts, id, err := c.cfg.Passkeys.BeginApproval(ctx, pu, passkey.Binding{CallID: call.ID, Digest: digest, Operator: v.user.Name})
	if errors.Is(err, passkey.ErrNoPasskey) {
		return jsonError(ec, http.StatusConflict, "no_passkey", "you have no passkey: register one on your account page")
	}
	if err != nil {
		return c.passkeyRefusal(ec, err)
	}
	return ec.JSON(http.StatusOK, map[string]any{"ceremony": id, "options": opts})
}

func (c *Console) finishPasskeyApproval(ec echo.Context) error {
	if c.cfg.Passkeys == nil {
		return jsonError(ec, http.StatusNotFound, "passkeys_off", "passkeys are not available on this console")
	}
	v, form, ctx := viewerOf(ec), ec.Request().PostForm, ec.Request().Context()
	call, err := c.q.Call(ctx, ec.Param("id"))
	if err != nil {
		return decisionJSON(ec, err)
	}
	pu, stored, err := c.passkeyUser(ctx, v.user)
	if err != nil {
		return err
	}
	// The binding now is the call as stored: a digest that changed since
	// the prompt opened approves nothing (call_changed). The ceremony is
	// used up whatever happens.
	now := passkey.Binding{CallID: call.ID, Digest: call.Digest, Operator: v.user.Name}
	ap, err := c.cfg.Passkeys.FinishApproval(ctx, form.Get("ceremony"), pu, now, []byte(form.Get("response")))
	if err != nil {
		c.log.Info("passkey approval refused", slog.String("call", call.ID), slog.String("operator", v.user.Name), slog.Any("error", err))
		return c.passkeyRefusal(ec, err)
	}
	var before uint32
	for _, p := range stored {
		if string(p.ID) == string(ap.Credential.ID) {
			before = p.SignCount
		}
	}
	record, err := json.Marshal(ap.Credential.Credential)
	if err != nil {
		return err
	}
	evidence, err := json.Marshal(ap.Evidence)
	if err != nil {
		return err
	}
	in := queue.ApproveInput{Operator: v.user.Name, Channel: audit.ChannelWeb, CallID: call.ID, Digest: call.Digest,
		Comment: form.Get("comment"), Confirm: form.Get("confirm"), AcceptWarnings: form.Get("ack_warnings") == "1",
		Presented: form.Get("presented"), For: form.Get("for"),
		Passkey: &queue.PasskeyProof{Operator: v.user.Name, CredentialID: ap.Credential.ID,
			Name: ap.Credential.Name, CountBefore: before, CountAfter: ap.Evidence.SignCount, Record: record, Evidence: evidence},
		Seen: call}
	if _, err := c.q.ApproveWith(ctx, in); err != nil {
		return decisionJSON(ec, err)
	}
	c.log.Info("approved with a passkey", slog.String("call", call.ID), slog.String("operator", v.user.Name),
		slog.String("passkey", ap.Credential.Name))
	return ec.JSON(http.StatusOK, map[string]any{"approved": call.ID, "next": afterDecision(call.ID, "approved", form.Get("q"))})
}
