//! Lists: one page as [`Page`], every page as a stream.

use futures_util::stream::{self, BoxStream};
use futures_util::{StreamExt, TryStreamExt};
use reqwest::Url;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::error::Error;

/// One page of a list, newest first (the event feed: oldest first).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct Page<T> {
    pub data: Vec<T>,
    /// More items follow the last one of `data`.
    pub has_more: bool,
}

/// Paging and filters of a list request.
pub(crate) trait ListParams {
    /// The page size.
    fn limit(&self) -> Option<u32>;
    /// Where the list starts: after this id.
    fn starting_after(&self) -> Option<&str>;
    /// The filters, as query pairs.
    fn filters(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// Objects a list can continue after (its cursor is the last id of a page).
pub trait HasId {
    fn id(&self) -> &str;
}

macro_rules! has_id {
    ($($ty:ty),*) => {
        $(impl HasId for $ty {
            fn id(&self) -> &str {
                &self.id
            }
        })*
    };
}

has_id!(
    crate::Payment,
    crate::Refund,
    crate::BalanceTransaction,
    crate::Payout,
    crate::Dispute,
    crate::Event,
    crate::WebhookEndpoint,
    crate::WebhookDelivery
);

impl Client {
    /// `base/v1/<segments…>?limit=&<filters>`: a list without its cursor.
    fn list_url(&self, segments: &[&str], params: &impl ListParams) -> Result<Url, Error> {
        let mut url = self.url(segments)?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = params.limit() {
                query.append_pair("limit", &limit.to_string());
            }
            for (name, value) in params.filters() {
                query.append_pair(name, &value);
            }
        }
        Ok(url)
    }

    /// One page of a list.
    pub(crate) async fn list<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        params: &impl ListParams,
    ) -> Result<Page<T>, Error> {
        let url = self.list_url(segments, params).map(|mut url| {
            if let Some(after) = params.starting_after() {
                url.query_pairs_mut().append_pair("starting_after", after);
            }
            url
        });
        self.get(url).await
    }

    /// Every item of a list from `starting_after` on, page after page.
    pub(crate) fn list_all<T>(
        &self,
        segments: &[&str],
        params: &impl ListParams,
    ) -> BoxStream<'static, Result<T, Error>>
    where
        T: DeserializeOwned + HasId + Send + 'static,
    {
        let url = self.list_url(segments, params);
        self.paginate(
            url,
            "starting_after",
            params.starting_after().map(str::to_owned),
        )
    }

    /// Every item of a list, page after page: `cursor` names the query parameter that
    /// continues after the last item of the page before (`starting_after`, or `after` for
    /// the event feed), `start` its first value.
    pub(crate) fn paginate<T>(
        &self,
        url: Result<Url, Error>,
        cursor: &'static str,
        start: Option<String>,
    ) -> BoxStream<'static, Result<T, Error>>
    where
        T: DeserializeOwned + HasId + Send + 'static,
    {
        let url = match url {
            Ok(url) => url,
            Err(e) => return stream::once(async { Err(e) }).boxed(),
        };
        let client = self.clone();
        // `None` once the last page was read.
        let state = Some(start);
        stream::try_unfold(state, move |state| {
            let (client, mut url) = (client.clone(), url.clone());
            async move {
                let Some(after) = state else {
                    return Ok::<_, Error>(None);
                };
                if let Some(after) = &after {
                    url.query_pairs_mut().append_pair(cursor, after);
                }
                let page: Page<T> = client.get(Ok(url)).await?;
                let next = match page.data.last() {
                    Some(last) if page.has_more => Some(Some(last.id().to_owned())),
                    _ => None,
                };
                Ok(Some((page.data, next)))
            }
        })
        .map_ok(|items| stream::iter(items.into_iter().map(Ok)))
        .try_flatten()
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_urls_carry_the_page_size_and_filters() {
        let client = Client::new("http://example.test", "sk").expect("client");
        let params = crate::ListPayments {
            limit: Some(5),
            starting_after: Some("pay_9".into()),
            status: Some(crate::PaymentStatus::Succeeded),
            customer_id: Some("cus 1&2".into()),
        };
        let url = client.list_url(&["payments"], &params).expect("url");
        assert_eq!(
            url.as_str(),
            "http://example.test/v1/payments?limit=5&status=succeeded&customer_id=cus+1%262"
        );
    }
}
