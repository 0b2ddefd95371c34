package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/prices"
)

func (c *cli) pricesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "prices",
		Short:   "what model calls cost: the embedded price table and the org file's prices:",
		Example: "  crewlet prices show claude-3-5-sonnet-20241022\n  crewlet prices show --profile local --input-tokens 20000 --output-tokens 800",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	cmd.AddCommand(c.pricesShowCmd())
	return cmd
}

// pricesShowCmd quotes one call of a model, or of a profile's model at its
// endpoint.
func (c *cli) pricesShowCmd() *cobra.Command {
	var profile string
	var input, output, cached int64
	cmd := readCommand(c, &cobra.Command{
		Use:   "show [MODEL]",
		Short: "what one call of a model (or --profile's model) would cost now, and the price version a receipt would name (GET /prices)",
		Example: "  crewlet prices show gpt-4o-mini\n  crewlet prices show --profile local\n" +
			"  crewlet prices show claude-sonnet-4-5 --input-tokens 250000 --output-tokens 2000 --cached-tokens 200000 -o json",
		Args: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (profile != "") || len(args) > 1 {
				return usageErrorf(cmd, "name one model (crewlet prices show gpt-4o-mini) or a profile (--profile NAME), one of the two; got %q", args)
			}
			return nil
		},
	}, func(args []string) (string, error) {
		q := url.Values{"input_tokens": {fmt.Sprint(input)}, "output_tokens": {fmt.Sprint(output)}, "cached_tokens": {fmt.Sprint(cached)}}
		if len(args) == 1 {
			q.Set("model", args[0])
		} else {
			q.Set("profile", profile)
		}
		return "/prices?" + q.Encode(), nil
	}, printPriceQuote)
	cmd.Flags().StringVar(&profile, "profile", "", "quote this profile of the org: its model, at the provider its base_url is")
	cmd.Flags().Int64Var(&input, "input-tokens", 1000, "prompt tokens of the call, cached ones included")
	cmd.Flags().Int64Var(&output, "output-tokens", 1000, "answer tokens of the call")
	cmd.Flags().Int64Var(&cached, "cached-tokens", 0, "the part of --input-tokens read from the provider's prompt cache")
	return cmd
}

func printPriceQuote(w io.Writer, q api.PriceQuote) error {
	name := q.Model
	if q.Profile != "" {
		name = fmt.Sprintf("%s (profile %s)", q.Model, q.Profile)
	}
	if !q.Priced {
		_, err := fmt.Fprintf(w, "%s: no price in the table (%s) or the org file's prices:\n"+
			"its calls are counted as unpriced tokens; add {model: %s, input_mtok: N, output_mtok: N} to prices:\n",
			name, q.TableVersion, q.Model)
		return err
	}
	cache := "the input price"
	if q.Rates.HasCacheRead {
		cache = usdPerMTok(q.Rates.CacheRead)
	}
	_, err := fmt.Fprintf(w, "%s priced as %s (%s), version %s\n"+
		"per million tokens: input %s, output %s, cached input %s\n"+
		"a call of %d input (%d cached) and %d output tokens: %s\n",
		name, q.Matched, q.Provider, q.Version,
		usdPerMTok(q.Rates.Input), usdPerMTok(q.Rates.Output), cache,
		q.Tokens.Input, q.Tokens.Cached, q.Tokens.Output, usd(q.NanoUSD))
	return err
}

// usd shows an amount in nano-dollars as dollars, to the micro-dollar.
func usd(nano int64) string { return fmt.Sprintf("$%.6f", prices.USD(nano)) }

// unpricedNote says how many tokens no price was found for, if any.
func unpricedNote(tokens int64) string {
	if tokens == 0 {
		return ""
	}
	return fmt.Sprintf("; %d tokens unpriced (add their model to prices:)", tokens)
}

// usdPerMTok shows a rate in nano-dollars per million tokens as dollars.
func usdPerMTok(nano int64) string { return fmt.Sprintf("$%g", prices.MTok(nano)) }

// costsCmd prints what the company's model calls cost, grouped by a key.
func (c *cli) costsCmd() *cobra.Command {
	var by, since, until string
	cmd := readCommand(c, &cobra.Command{
		Use: "costs", Short: "what the company's model calls cost, by seat, role, model, profile or day, over a range of days (GET /costs)",
		Example: "  crewlet costs\n  crewlet costs --by model --since 2026-11-01 --until 2026-11-30\n  crewlet costs --by day -o json | jq '.rows[] | [.key, .usd]'",
		Args:    noArgs,
	}, func([]string) (string, error) {
		q := url.Values{"by": {by}}
		if since != "" {
			q.Set("since", since)
		}
		if until != "" {
			q.Set("until", until)
		}
		return "/costs?" + q.Encode(), nil
	}, printCosts)
	cmd.Flags().StringVar(&by, "by", "seat", "group by seat, role, model, profile or day")
	cmd.Flags().StringVar(&since, "since", "", "first day, YYYY-MM-DD on the company's clock (default: the first of this month)")
	cmd.Flags().StringVar(&until, "until", "", "last day, YYYY-MM-DD on the company's clock, included (default: today)")
	return cmd
}

func printCosts(w io.Writer, v api.Costs) error {
	fmt.Fprintf(w, "costs by %s, %s to %s (%s)\n\n", v.By, v.Since, v.Until, v.Timezone)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tCOST\tCALLS\tTOKENS IN\tCACHED\tOUT\tUNPRICED\n", strings.ToUpper(v.By))
	row := func(key string, c crewlet.Cost) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", dash(key), usd(c.NanoUSD), c.Rounds, c.InputTokens, c.CachedTokens, c.OutputTokens, c.UnpricedTokens)
	}
	for _, r := range v.Rows {
		row(r.Key, r.Cost)
	}
	row("total", v.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.Total.UnpricedTokens > 0 {
		fmt.Fprintf(w, "\n%d tokens have no price: add their model to prices: in the org file (crewlet costs --by model shows which)\n", v.Total.UnpricedTokens)
	}
	fmt.Fprintf(w, "\nprices: %s (table %s)\n", strings.Join(v.PriceVersions, ", "), v.TableVersion)
	return nil
}
